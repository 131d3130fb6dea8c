import Foundation
import SIWATestSupport

/// Runs the built `siwa-endpoint` executable, as an operator would.
struct EndpointBinary {
    struct Run {
        let status: Int32
        let standardOutput: String
        let standardError: String
    }

    /// Beside the test bundle in the build products directory.
    static let url: URL = {
        if let override = ProcessInfo.processInfo.environment["SIWA_ENDPOINT_BINARY"] {
            return URL(fileURLWithPath: override)
        }
        let testBundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        return testBundle.deletingLastPathComponent().appendingPathComponent("siwa-endpoint")
    }()

    static func run(_ arguments: [String], input: Data? = nil) throws -> Run {
        let run = try CommandRun.run(url, arguments, input: input)
        return Run(status: run.status, standardOutput: run.output, standardError: run.errors)
    }
}
