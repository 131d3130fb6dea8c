import Foundation
import Glibc

/// A real `redis-server` for tests: its own free loopback port, its own temporary
/// directory, no persistence (`--save "" --appendonly no`), and a Unix socket in that
/// directory. It can be stopped, killed and restarted on the same port and directory
/// so a test can simulate an outage. Always call `shutdown()` (a `defer` right after
/// creating it); `deinit` does it too as a backstop. The one way the tests start a Redis
/// server: this type, or `launch` for the sentinels and cluster nodes that need their own
/// arguments.
public final class RedisServerProcess: @unchecked Sendable {
    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    /// A TLS-only server (`--port 0 --tls-port`): its certificate, key and the CA it
    /// trusts for clients' certificates, which it requires when `requireClientCertificates`.
    public struct TLSFiles: Sendable {
        public let certificatePath: String
        public let keyPath: String
        public let caPath: String
        public var requireClientCertificates = false

        public init(certificatePath: String, keyPath: String, caPath: String, requireClientCertificates: Bool = false) {
            self.certificatePath = certificatePath
            self.keyPath = keyPath
            self.caPath = caPath
            self.requireClientCertificates = requireClientCertificates
        }
    }

    /// Fixed once started: restarts reuse it.
    public private(set) var port = 0
    public let directory: URL
    public let password: String?
    /// AOF on with `appendfsync always`: state survives a SIGKILL and a restart.
    public let appendOnly: Bool
    /// TLS only on `port` (no plain TCP port) when set; the unix socket stays plain. A test
    /// may change it between a `stop()` and a `start()` (another certificate, same port).
    public var tls: TLSFiles? {
        get { lock.withLock { tlsFiles } }
        set { lock.withLock { tlsFiles = newValue } }
    }
    private var tlsFiles: TLSFiles?
    /// `redis-server`, or `valkey-server`.
    public let flavor: RedisFlavor
    private var process: Process?
    private let lock = NSLock()

    /// The Unix socket Redis also listens on.
    public var unixSocketPath: String { directory.appendingPathComponent("redis.sock").path }

    /// `redis://127.0.0.1:<port>/<database>` (with TLS `rediss://localhost:...`, the name its
    /// test certificate holds), with the password when one is set.
    public func url(database: Int = 0) -> String {
        let credentials = password.map { ":\($0)@" } ?? ""
        if tls != nil { return "rediss://\(credentials)localhost:\(port)/\(database)" }
        return "redis://\(credentials)127.0.0.1:\(port)/\(database)"
    }

    /// Starts redis-server; retries on a new port if the chosen one was taken meanwhile.
    public init(
        password: String? = nil, appendOnly: Bool = false, startTimeout: TimeInterval = 10, tls: TLSFiles? = nil,
        flavor: RedisFlavor = .underTest
    ) throws {
        // hiredis writes with write(2): a write to a killed server must not kill the test run.
        signal(SIGPIPE, SIG_IGN)
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("siwa-redis-test-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.password = password
        self.appendOnly = appendOnly
        tlsFiles = tls
        self.flavor = flavor
        var lastError: Error = StartError(description: "redis-server did not start")
        for _ in 0..<3 {
            port = try LoopbackPort.free()
            do {
                try start(timeout: startTimeout)
                return
            } catch {
                lastError = error
            }
        }
        try? FileManager.default.removeItem(at: directory)
        throw lastError
    }

    deinit { shutdown() }

    /// Starts (or restarts) the server on the same port and directory and waits until it answers PING.
    public func start(timeout: TimeInterval = 10) throws {
        lock.lock()
        defer { lock.unlock() }
        if let process, process.isRunning { return }
        var arguments = [
            "--port", tlsFiles == nil ? String(port) : "0", "--bind", "127.0.0.1", "--dir", directory.path,
            "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--unixsocket", unixSocketPath, "--unixsocketperm", "700",
            "--logfile", directory.appendingPathComponent("redis.log").path,
        ]
        if let password { arguments += ["--requirepass", password] }
        if appendOnly { arguments += ["--appendonly", "yes", "--appendfsync", "always"] }
        if let tls = tlsFiles {
            arguments += [
                "--tls-port", String(port), "--tls-cert-file", tls.certificatePath, "--tls-key-file", tls.keyPath,
                "--tls-ca-cert-file", tls.caPath, "--tls-auth-clients", tls.requireClientCertificates ? "yes" : "no",
            ]
        }
        let server = try Self.launch(flavor, arguments)
        process = server
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if !server.isRunning {
                process = nil
                throw StartError(description: "redis-server exited at start (port \(port) taken?)")
            }
            if answersPing() { return }
            Thread.sleep(forTimeInterval: 0.02)
        }
        Foundation.kill(server.processIdentifier, SIGKILL)
        Self.stop(server, signal: SIGKILL, timeout: 5)
        process = nil
        throw StartError(description: "redis-server did not answer within \(timeout) s")
    }

    /// Graceful stop (`SHUTDOWN NOSAVE`), then SIGKILL if it has not exited within the timeout.
    ///
    /// Not SIGTERM: a child spawned from a Swift Testing worker thread inherits that
    /// thread's signal mask, in which SIGTERM is blocked, so redis-server never sees it.
    public func stop(timeout: TimeInterval = 5) {
        lock.lock()
        defer { lock.unlock() }
        guard let process else { return }
        if process.isRunning {
            var commands = password.map { "AUTH \($0)\r\n" } ?? ""
            commands += "SHUTDOWN NOSAVE\r\n"
            _ = exchange(commands)
        }
        Self.stop(process, signal: SIGKILL, timeout: timeout)
        self.process = nil
    }

    /// Sends `signal` to redis-server (SIGSTOP makes a Redis that hangs; SIGCONT resumes it).
    public func send(_ signal: Int32) {
        lock.lock()
        defer { lock.unlock() }
        guard let process, process.isRunning else { return }
        Glibc.kill(process.processIdentifier, signal)
    }

    /// A crash: SIGKILL, no chance to close connections cleanly.
    public func kill() {
        lock.lock()
        defer { lock.unlock() }
        guard let process else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        Self.stop(process, signal: SIGKILL, timeout: 5)
        self.process = nil
    }

    /// Stop, then start again on the same port and directory.
    public func restart(timeout: TimeInterval = 10) throws {
        stop()
        try start(timeout: timeout)
    }

    /// Stops the server and removes its directory.
    public func shutdown() {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs `flavor`'s server with `arguments`, its output discarded (each server is given
    /// its own `--logfile` or a configuration naming one), and returns at once: the one place a
    /// test spawns redis-server or valkey-server. Waiting until it answers is the caller's
    /// (`start` waits for PING; a sentinel group or a cluster waits until it has formed).
    public static func launch(_ flavor: RedisFlavor, _ arguments: [String]) throws -> Process {
        let server = Process()
        server.executableURL = URL(fileURLWithPath: flavor.serverPath)
        server.arguments = arguments
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        return server
    }

    /// Waits up to `timeout` for the process to exit by itself, then sends `signal` and waits again.
    private static func stop(_ process: Process, signal: Int32, timeout: TimeInterval) {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        guard process.isRunning else { return }
        Foundation.kill(process.processIdentifier, signal)
        let hardDeadline = Date().addingTimeInterval(5)
        while process.isRunning && Date() < hardDeadline { Thread.sleep(forTimeInterval: 0.01) }
    }

    /// A raw PING (a server with a password answers NOAUTH, which also means "up").
    private func answersPing() -> Bool {
        guard let answer = exchange("PING\r\n") else { return false }
        return answer.hasPrefix("+PONG") || answer.hasPrefix("-NOAUTH")
    }

    /// Sends inline commands on a fresh connection and returns the first bytes answered:
    /// over loopback TCP, or over the unix socket for a TLS-only server.
    private func exchange(_ commands: String) -> String? {
        let connected =
            tlsFiles == nil
            ? connectToLoopback(port: port, receiveTimeoutMicroseconds: 500_000)
            : connectToUnixSocket(path: unixSocketPath, receiveTimeoutMicroseconds: 500_000)
        guard let descriptor = connected else { return nil }
        defer { close(descriptor) }
        let bytes = Array(commands.utf8)
        guard write(descriptor, bytes, bytes.count) == bytes.count else { return nil }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = read(descriptor, &buffer, buffer.count)
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }
}

/// Which server the test support starts: Redis, or Valkey (its fork, the same protocol,
/// Lua and ACL as Redis 7.2), from bookworm-backports on Debian 12.
public enum RedisFlavor: String, CaseIterable, CustomStringConvertible, Sendable {
    case redis
    case valkey

    public var serverPath: String { self == .redis ? "/usr/bin/redis-server" : "/usr/bin/valkey-server" }
    /// The command-line client, which also makes a cluster (`--cluster create`).
    public var cliPath: String { self == .redis ? "/usr/bin/redis-cli" : "/usr/bin/valkey-cli" }

    /// The server the suites run against: `SIWA_TEST_REDIS_SERVER=valkey` (set by
    /// `scripts/test` for its Valkey pass) or Redis by default.
    public static let underTest: RedisFlavor =
        ProcessInfo.processInfo.environment["SIWA_TEST_REDIS_SERVER"].flatMap(RedisFlavor.init(rawValue:)) ?? .redis

    public var description: String { rawValue }
}
