import Foundation
import Glibc

/// Runs a program to its end: its exit status, standard output and standard error. The
/// one way the tests run the real `siwa-endpoint` binary as an operator would (`user`,
/// `status`, `spool`, `reconcile`, a `serve` that must refuse to start) and the readers
/// in `examples/` (Python, Node.js, Ruby).
///
/// Output goes to files, not pipes, so a chatty standard error cannot block the process
/// while standard output is being read. Bounded: the process is killed after `timeout`,
/// and the run then reports the signal as its status.
struct CommandRun {
    let status: Int32
    let output: String
    let errors: String

    var lines: [String] { output.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) }

    /// The `siwa-endpoint` binary under test; `environment` is its whole environment, plus
    /// `PATH` when it names none.
    static func endpoint(
        _ arguments: [String], environment: [String: String] = [:], timeout: Duration = .seconds(60)
    ) throws -> CommandRun {
        try run(
            ServeProcess.binaryURL, arguments,
            environment: environment.merging(["PATH": "/usr/bin:/bin"]) { current, _ in current }, timeout: timeout)
    }

    /// `environment` nil inherits the test's environment.
    static func run(
        _ executable: URL, _ arguments: [String], environment: [String: String]? = nil,
        timeout: Duration = .seconds(60)
    ) throws -> CommandRun {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let outputURL = directory.appendingPathComponent("stdout")
        let errorURL = directory.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: outputURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorURL.path, contents: nil)
        let output = try FileHandle(forWritingTo: outputURL)
        let errors = try FileHandle(forWritingTo: errorURL)
        defer {
            try? output.close()
            try? errors.close()
        }

        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let environment { process.environment = environment }
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let (seconds, attoseconds) = timeout.components
        let watchdog = DispatchWorkItem { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        DispatchQueue.global().asyncAfter(
            deadline: .now() + Double(seconds) + Double(attoseconds) / 1e18, execute: watchdog)
        process.waitUntilExit()
        watchdog.cancel()
        return CommandRun(
            status: process.terminationStatus,
            output: try String(contentsOf: outputURL, encoding: .utf8),
            errors: try String(contentsOf: errorURL, encoding: .utf8))
    }
}
