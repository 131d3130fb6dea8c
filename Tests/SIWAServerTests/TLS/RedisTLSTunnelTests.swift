import Foundation
import Glibc
import SIWARedis
import Testing

/// Redis over TLS through the shipped `deploy/stunnel-redis.conf`: a real redis-server
/// with `tls-port` only (no plain TCP port) under a test CA, a real stunnel4 client
/// between it and the real `serve`, which speaks plain Redis to stunnel on loopback.
@Suite("Redis over TLS through stunnel", .serialized)
struct RedisTLSTunnelTests {
    static let shippedConfiguration = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("deploy/stunnel-redis.conf")

    /// A child process with its output in a file.
    final class Child {
        let process = Process()
        let logPath: String

        init(_ executable: String, _ arguments: [String], logPath: String) throws {
            self.logPath = logPath
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
            let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            process.standardOutput = log
            process.standardError = log
            try process.run()
        }

        var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

        func kill() {
            guard process.isRunning else { return }
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// The shipped file with only what differs on this machine replaced: the ports, the CA, the host name.
    static func stunnelConfiguration(acceptPort: Int, redisTLSPort: Int, caFile: String) throws -> String {
        let shipped = try String(contentsOf: shippedConfiguration, encoding: .utf8)
        let replacements = [
            "accept": "127.0.0.1:\(acceptPort)", "connect": "127.0.0.1:\(redisTLSPort)", "CAfile": caFile,
            "checkHost": "localhost", "sni": "localhost",
        ]
        var replaced: Set<String> = []
        let lines = shipped.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            let name = line.split(separator: "=", maxSplits: 1).first?.trimmingCharacters(in: .whitespaces) ?? ""
            guard !line.hasPrefix(";"), let value = replacements[name] else { return String(line) }
            replaced.insert(name)
            return "\(name) = \(value)"
        }
        #expect(replaced == Set(replacements.keys), "the shipped stunnel file lost one of its settings")
        return lines.joined(separator: "\n")
    }

    @Test(
        "a notification is applied through stunnel to a TLS-only Redis; with the wrong CA, stunnel refuses and serve spools"
    )
    func throughTheTunnel() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let authorityDirectory = directory.appendingPathComponent("ca")
        let wrongDirectory = directory.appendingPathComponent("wrong-ca")
        try FileManager.default.createDirectory(at: authorityDirectory, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: wrongDirectory, withIntermediateDirectories: true)
        let authority = try TestCertificateAuthority(in: authorityDirectory)
        let wrongAuthority = try TestCertificateAuthority(in: wrongDirectory)

        // TLS only (no plain TCP port), Redis itself in both passes of the suite, as ever.
        let redis = try RedisServerProcess(
            tls: .init(
                certificatePath: authority.serverCertificatePath, keyPath: authority.serverKeyPath,
                caPath: authority.caCertificatePath),
            flavor: .redis)
        defer { redis.shutdown() }
        let tlsPort = redis.port
        // The test reads Redis over its unix socket; serve can only reach it through stunnel.
        let inspector = redis.unixSocketConnection()
        #expect(
            waitUntil(timeout: 10) { (try? inspector.command("PING"))?.string == "PONG" },
            "\((try? String(contentsOf: redis.directory.appendingPathComponent("redis.log"), encoding: .utf8)) ?? "")")

        let acceptPort = try LoopbackPort.free()
        func startTunnel(caFile: String, name: String) throws -> Child {
            let path = directory.appendingPathComponent("\(name).conf").path
            try Self.stunnelConfiguration(acceptPort: acceptPort, redisTLSPort: tlsPort, caFile: caFile)
                .write(toFile: path, atomically: true, encoding: .utf8)
            let tunnel = try Child(
                "/usr/bin/stunnel4", [path], logPath: directory.appendingPathComponent("\(name).log").path)
            #expect(
                waitUntil(timeout: 10) {
                    guard let descriptor = connectToLoopback(port: acceptPort, receiveTimeoutMicroseconds: 100_000)
                    else { return false }
                    close(descriptor)
                    return true
                }, "stunnel did not listen: \(tunnel.log)")
            return tunnel
        }

        let tunnel = try startTunnel(caFile: authority.caCertificatePath, name: "stunnel")
        defer { tunnel.kill() }
        let stack = try ServeStack(extraEnvironment: ["SIWA_REDIS_URL": "redis://127.0.0.1:\(acceptPort)/0"])
        defer { stack.shutdown() }

        let applied = try stack.post(try stack.body(type: "consent-revoked", sub: "001.tls.a"))
        #expect(applied.status == 200)
        #expect(applied.jsonFields["status"] == "applied")
        #expect(
            try inspector.command("HGET", "siwa:user:{\(ServeStack.clientID):001.tls.a}", "last_event_type").string
                == "consent-revoked")
        #expect(try stack.health().status == 200)
        #expect(try stack.redisSnapshot() == [], "serve wrote to its plain Redis instead of the tunnel")

        // The same tunnel trusting another CA: the handshake fails, nothing reaches Redis.
        tunnel.kill()
        let refusing = try startTunnel(caFile: wrongAuthority.caCertificatePath, name: "stunnel-wrong-ca")
        defer { refusing.kill() }
        let spooled = try stack.post(try stack.body(type: "consent-revoked", sub: "001.tls.b"))
        #expect(spooled.status == 200)
        #expect(spooled.jsonFields["status"] == "spooled")
        #expect(try inspector.command("EXISTS", "siwa:user:{\(ServeStack.clientID):001.tls.b}").integer == 0)
        #expect(try inspector.command("XLEN", "siwa:events").integer == 1)
        #expect(try stack.health().status == 503)
        #expect(
            waitUntil(timeout: 5) { refusing.log.contains("certificate verify failed") }, "\(refusing.log)")
    }
}
