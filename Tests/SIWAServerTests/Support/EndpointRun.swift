import Foundation
// The tests' shared kit (one process runner, one free-port finder, one `waitUntil`), seen
// by every file of this suite.
@_exported import SIWATestSupport

extension CommandRun {
    /// The `siwa-endpoint` binary under test; `environment` is its whole environment, plus
    /// `PATH` when it names none.
    static func endpoint(
        _ arguments: [String], environment: [String: String] = [:], timeout: Duration = .seconds(60)
    ) throws -> CommandRun {
        try run(
            ServeProcess.binaryURL, arguments,
            environment: environment.merging(["PATH": "/usr/bin:/bin"]) { current, _ in current }, timeout: timeout)
    }
}
