import Foundation
import Glibc

/// Where the tests find the `siwa-endpoint` binary under test: the one locator both suites
/// use. `SIWA_ENDPOINT_BINARY` when set (scripts/test sets it), else beside the test bundle
/// in the build products directory.
public enum EndpointBinary {
    public static let url: URL = {
        if let override = ProcessInfo.processInfo.environment["SIWA_ENDPOINT_BINARY"] {
            return URL(fileURLWithPath: override)
        }
        let testBundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        return testBundle.deletingLastPathComponent().appendingPathComponent("siwa-endpoint")
    }()
}

/// The real `siwa-endpoint` running as a child the test holds while it runs: `serve`,
/// `deliver`, or a command stopped or observed midway. The one launcher of the binary
/// (`CommandRun` runs it to its end instead). Output goes to files, never pipes, so a
/// chatty log cannot block it. Whoever starts one stops it (`stop()` kills what still runs).
public final class EndpointProcess: @unchecked Sendable {
    public struct StartFailure: Error, CustomStringConvertible {
        public let description: String
    }

    public let process: Process

    /// Starts `siwa-endpoint <arguments>` with exactly `environment`. Standard output and
    /// standard error go to the given files (created when missing, appended to; one file
    /// for both when the same), or to /dev/null when nil. `launcher`, when given, runs the
    /// binary under another program: its arguments, then the binary's path and `arguments`
    /// (strace, setpriv, a shell that closes descriptors first).
    public init(
        _ arguments: [String], environment: [String: String], standardOutput: URL? = nil,
        standardError: URL? = nil, standardInput: FileHandle = .nullDevice, launcher: [String] = []
    ) throws {
        process = Process()
        if let program = launcher.first {
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = Array(launcher.dropFirst()) + [EndpointBinary.url.path] + arguments
        } else {
            process.executableURL = EndpointBinary.url
            process.arguments = arguments
        }
        process.environment = environment
        let output = try standardOutput.map(Self.appending)
        let errors = try standardError.map { $0 == standardOutput ? output! : try Self.appending($0) }
        // The child holds its own copies of the descriptors once it runs.
        defer {
            try? output?.close()
            if standardError != standardOutput { try? errors?.close() }
        }
        process.standardOutput = output ?? FileHandle.nullDevice
        process.standardError = errors ?? FileHandle.nullDevice
        process.standardInput = standardInput
        try process.run()
    }

    public var processIdentifier: Int32 { process.processIdentifier }
    public var isRunning: Bool { process.isRunning }

    public func send(_ signal: Int32) {
        guard process.isRunning else { return }
        Glibc.kill(process.processIdentifier, signal)
    }

    /// The exit status, or nil if it still runs at the deadline.
    public func waitForExit(timeout: TimeInterval) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        return process.isRunning ? nil : process.terminationStatus
    }

    /// SIGKILL if it still runs, then waits for it (bounded).
    public func stop() {
        guard process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        _ = waitForExit(timeout: 10)
    }

    private static func appending(_ url: URL) throws -> FileHandle {
        if !FileManager.default.fileExists(atPath: url.path) {
            _ = FileManager.default.createFile(atPath: url.path, contents: nil)
        }
        let handle = try FileHandle(forWritingTo: url)
        handle.seekToEndOfFile()
        return handle
    }
}

extension CommandRun {
    /// The `siwa-endpoint` binary under test, run to its end; `environment` is its whole
    /// environment, plus `PATH` when it names none.
    public static func endpoint(
        _ arguments: [String], environment: [String: String] = [:], timeout: Duration = .seconds(60)
    ) throws -> CommandRun {
        try run(
            EndpointBinary.url, arguments,
            environment: environment.merging(["PATH": "/usr/bin:/bin"]) { current, _ in current }, timeout: timeout)
    }
}
