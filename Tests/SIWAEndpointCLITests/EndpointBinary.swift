import Foundation
import SIWATestSupport

/// Runs the built `siwa-endpoint` executable (found by the tests' one locator,
/// `EndpointBinary.url`), as an operator would, with the test's environment.
extension EndpointBinary {
    struct Run {
        let status: Int32
        let standardOutput: String
        let standardError: String
    }

    static func run(_ arguments: [String], input: Data? = nil) throws -> Run {
        let run = try CommandRun.run(url, arguments, input: input)
        return Run(status: run.status, standardOutput: run.output, standardError: run.errors)
    }
}
