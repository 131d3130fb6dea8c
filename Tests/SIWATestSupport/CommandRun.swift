import Foundation
import Glibc
import Synchronization

/// Runs a program to its end: its exit status, standard output and standard error. The
/// one way the tests run a program to completion: the real `siwa-endpoint` binary as an
/// operator would (`keygen`, `user`, `status`, `spool`, `reconcile`, a `serve` that must
/// refuse to start), the readers in `examples/`, and tools such as `redis-cli` or `mount`.
///
/// Output goes to files, not pipes, so a chatty standard error cannot block the process
/// while standard output is being read. Bounded: the process is killed after `timeout`;
/// `timedOut` then says so and `status` is the signal.
public struct CommandRun: Sendable {
    public let status: Int32
    public let output: String
    public let errors: String
    /// The watchdog killed the process at `timeout`.
    public let timedOut: Bool

    public var lines: [String] { output.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) }

    /// `environment` nil inherits the test's environment; `input`, when given, is the
    /// program's standard input (else it reads an empty one).
    public static func run(
        _ executable: URL, _ arguments: [String], environment: [String: String]? = nil, input: Data? = nil,
        timeout: Duration = .seconds(60)
    ) throws -> CommandRun {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let outputURL = directory.appendingPathComponent("stdout")
        let errorURL = directory.appendingPathComponent("stderr")
        let inputURL = directory.appendingPathComponent("stdin")
        _ = FileManager.default.createFile(atPath: outputURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: inputURL.path, contents: input ?? Data())
        let output = try FileHandle(forWritingTo: outputURL)
        let errors = try FileHandle(forWritingTo: errorURL)
        let standardInput = try FileHandle(forReadingFrom: inputURL)
        defer {
            try? output.close()
            try? errors.close()
            try? standardInput.close()
        }

        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let environment { process.environment = environment }
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = standardInput
        try process.run()
        let (seconds, attoseconds) = timeout.components
        let killed = ManagedFlag()
        let watchdog = DispatchWorkItem {
            if process.isRunning {
                killed.set()
                kill(process.processIdentifier, SIGKILL)
            }
        }
        DispatchQueue.global().asyncAfter(
            deadline: .now() + Double(seconds) + Double(attoseconds) / 1e18, execute: watchdog)
        process.waitUntilExit()
        watchdog.cancel()
        return CommandRun(
            status: process.terminationStatus,
            output: try String(contentsOf: outputURL, encoding: .utf8),
            errors: try String(contentsOf: errorURL, encoding: .utf8),
            timedOut: killed.isSet)
    }
}

extension CommandRun {
    /// Runs a program whose standard output is a pipe nobody reads any more (what `| head -1`
    /// leaves once head has exited): its first write there meets a closed pipe. `output` is
    /// empty; `errors` is what it wrote on standard error.
    public static func runIntoClosedPipe(
        _ executable: URL, _ arguments: [String], environment: [String: String]? = nil,
        timeout: Duration = .seconds(60)
    ) throws -> CommandRun {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw POSIXError(.EMFILE) }
        close(ends[0])
        let errorURL = FileManager.default.temporaryDirectory.appendingPathComponent("closed-pipe-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: errorURL.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: errorURL) }
        let errors = try FileHandle(forWritingTo: errorURL)
        let output = FileHandle(fileDescriptor: ends[1], closeOnDealloc: true)
        defer {
            try? errors.close()
            try? output.close()
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
        let killed = ManagedFlag()
        let watchdog = DispatchWorkItem {
            if process.isRunning {
                killed.set()
                kill(process.processIdentifier, SIGKILL)
            }
        }
        DispatchQueue.global().asyncAfter(
            deadline: .now() + Double(seconds) + Double(attoseconds) / 1e18, execute: watchdog)
        process.waitUntilExit()
        watchdog.cancel()
        return CommandRun(
            status: process.terminationStatus, output: "",
            errors: try String(contentsOf: errorURL, encoding: .utf8), timedOut: killed.isSet)
    }
}

/// Set once, by the watchdog's thread; read after the process has exited.
private final class ManagedFlag: Sendable {
    private let value = Mutex(false)

    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
