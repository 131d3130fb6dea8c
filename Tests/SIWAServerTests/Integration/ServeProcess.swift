import Foundation
import Glibc

/// The real `siwa-endpoint serve` binary, started as a child process with its own
/// environment, its log on a file, stopped by SIGTERM or killed by SIGKILL.
final class ServeProcess {
    /// The child, started by the tests' one launcher.
    let endpoint: EndpointProcess
    var process: Process { endpoint.process }
    let logURL: URL
    let socketPath: String

    struct StartFailure: Error, CustomStringConvertible { let description: String }

    /// Starts serve and waits (bounded) until its socket accepts a connection. `launcher`,
    /// when given, runs serve under another program (strace): its arguments, then serve's.
    init(
        environment: [String: String], socketPath: String, logURL: URL, timeout: TimeInterval = 15,
        launcher: [String] = []
    ) throws {
        self.socketPath = socketPath
        self.logURL = logURL
        endpoint = try EndpointProcess(
            ["serve"], environment: environment.merging(["PATH": "/usr/bin:/bin"]) { current, _ in current },
            standardOutput: logURL, standardError: logURL, launcher: launcher)
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            guard process.isRunning else {
                throw StartFailure(description: "serve exited at start: \(logText)")
            }
            if Self.accepts(socketPath) { return }
            usleep(20_000)
        }
        kill()
        throw StartFailure(description: "serve did not listen within \(timeout) s: \(logText)")
    }

    static func accepts(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes + [0])
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return result == 0
    }

    var logText: String { (try? String(contentsOf: logURL, encoding: .utf8)) ?? "" }

    /// The JSON log lines with `"event":"<name>"`.
    func logLines(event name: String) -> [String] {
        logText.split(separator: "\n").map(String.init).filter { $0.contains(#""event":"\#(name)""#) }
    }

    /// The sum of the integer member `name` (`applied`, `stored`, `duplicate`, `rejected`...)
    /// over the `spool_replayed` lines logged so far. A pass logs its line after its last
    /// record reached Redis and its position was saved: wait for the total, never read it
    /// the moment Redis holds the records.
    func replayedTotal(_ name: String) -> Int {
        logLines(event: "spool_replayed").compactMap { SpoolDeadEndTests.integerField(name, in: $0) }.reduce(0, +)
    }

    func terminate() { endpoint.send(SIGTERM) }

    func kill() { endpoint.stop() }

    /// The exit status, or nil if still running at the deadline.
    func waitForExit(timeout: TimeInterval) -> Int32? { endpoint.waitForExit(timeout: timeout) }
}
