import Foundation
import Glibc
import SIWARedis
import SIWASettingKeys
import Testing

/// `RedisConnection` over TLS, in process, against a real TLS-only `redis-server`
/// (`--port 0 --tls-port`): the connection's own socket, OpenSSL's TLS over it, hiredis
/// only as the codec. The test reads Redis over the server's plain unix socket.
@Suite("Redis over TLS, in process", .serialized)
struct RedisTLSConnectionTests {
    @Test("rediss:// with the CA: commands of every shape go through TLS, and the plain port is closed")
    func commandsThroughTLS() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let server = try RedisServerProcess(tls: fixture.goodServer)
        defer { server.shutdown() }
        var endpoint = try RedisEndpoint(parsing: server.url())
        endpoint.tls = fixture.clientTLS
        let connection = RedisConnection(endpoint: endpoint)
        #expect(try connection.command("PING") == .status("PONG"))
        let value: [UInt8] = Array(repeating: 0x41, count: 100_000) + [0, 13, 10]
        #expect(try connection.command([Array("SET".utf8), Array("big".utf8), value]) == .status("OK"))
        #expect(try connection.command([Array("GET".utf8), Array("big".utf8)]) == .bulkString(value))
        #expect(
            try server.unixSocketConnection().command([Array("GET".utf8), Array("big".utf8)]) == .bulkString(value))
        #expect(try connection.command("INFO", "server").string?.contains("redis_version") == true)
        // Without TLS the same port does not speak Redis.
        let plain = RedisConnection(
            endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: server.port)),
            connectTimeout: .milliseconds(500), commandTimeout: .milliseconds(500))
        #expect(throws: RedisError.self) { try plain.command("PING") }
        #expect(try server.unixSocketConnection().command("DBSIZE").integer == 1)
    }

    @Test(
        "a certificate from another CA, an expired one, one naming another host: each refused, redis_tls_refused, naming the setting, nothing written"
    )
    func refusedCertificates() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        for refused in fixture.refusedServers {
            let server = try RedisServerProcess(tls: refused.files)
            defer { server.shutdown() }
            var endpoint = try RedisEndpoint(parsing: server.url())
            endpoint.tls = fixture.clientTLS
            let connection = RedisConnection(endpoint: endpoint)
            do {
                _ = try connection.command("SET", "written", "yes")
                Issue.record("\(refused.name): the certificate was accepted")
            } catch {
                #expect(error.code == .tlsRefused, "\(refused.name): \(error)")
                #expect(error.isConnectionError, "\(refused.name): spooled, as in an outage")
                #expect(error.message.lowercased().contains(refused.reason), "\(refused.name): \(error.message)")
                #expect(error.operatorMessage.contains(refused.setting), "\(refused.name): \(error.operatorMessage)")
                #expect(!error.message.contains("SIWA_"), "\(refused.name): \(error.message)")
            }
            #expect(!connection.isConnected)
            #expect(try server.unixSocketConnection().command("DBSIZE").integer == 0, "\(refused.name)")
        }
    }

    @Test(
        "the host connected to must be named by the certificate: 127.0.0.1 is not `localhost`, unless SIWA_REDIS_TLS_SERVER_NAME says so"
    )
    func hostNameIsVerified() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let server = try RedisServerProcess(tls: fixture.goodServer)
        defer { server.shutdown() }
        let byAddress = RedisConnection(
            endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: server.port), tls: fixture.clientTLS))
        #expect {
            try byAddress.command("PING")
        } throws: { error in
            (error as? RedisError)?.code == .tlsRefused
                && (error as? RedisError)?.message.contains("IP address mismatch") == true
        }
        var named = fixture.clientTLS
        named.serverName = "localhost"
        let byName = RedisConnection(
            endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: server.port), tls: named))
        #expect(try byName.command("PING") == .status("PONG"))
    }

    @Test("mutual TLS: a server that requires a client certificate refuses a client without one and serves one with it")
    func mutualTLS() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        var files = fixture.goodServer
        files.requireClientCertificates = true
        let server = try RedisServerProcess(tls: files)
        defer { server.shutdown() }
        var endpoint = try RedisEndpoint(parsing: server.url())
        endpoint.tls = fixture.clientTLS
        let anonymous = RedisConnection(endpoint: endpoint)
        #expect {
            try anonymous.command("SET", "anonymous", "yes")
        } throws: { error in
            (error as? RedisError)?.isConnectionError == true
        }
        endpoint.tls?.certificateFile = fixture.client.certificatePath
        endpoint.tls?.keyFile = fixture.client.keyPath
        let identified = RedisConnection(endpoint: endpoint)
        #expect(try identified.command("SET", "identified", "yes") == .status("OK"))
        #expect(
            try server.unixSocketConnection().command("KEYS", "*") == .array([.bulkString(Array("identified".utf8))]))
    }

    @Test("over TLS as over TCP: a command timeout when Redis hangs, then a new connection once it is back")
    func timeoutAndReconnect() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let server = try RedisServerProcess(tls: fixture.goodServer)
        defer {
            server.send(SIGCONT)
            server.shutdown()
        }
        var endpoint = try RedisEndpoint(parsing: server.url())
        endpoint.tls = fixture.clientTLS
        let connection = RedisConnection(
            endpoint: endpoint, connectTimeout: .milliseconds(500), commandTimeout: .milliseconds(300))
        #expect(try connection.command("PING") == .status("PONG"))
        server.send(SIGSTOP)
        let started = ContinuousClock.now
        #expect {
            try connection.command("PING")
        } throws: { error in
            (error as? RedisError)?.code == .timedOut
        }
        #expect(ContinuousClock.now - started < .seconds(5))
        #expect(!connection.isConnected)
        server.send(SIGCONT)
        #expect(try connection.command("PING") == .status("PONG"))
        // A restarted server: the broken stream is dropped and the next command reconnects.
        try server.restart()
        #expect(throws: RedisError.self) { try connection.command("PING") }
        #expect(try connection.command("PING") == .status("PONG"))
    }

    @Test("TLS files that cannot be used are refused before any connection, naming the setting")
    func unusableFiles() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let cases: [(RedisTLS, String)] = [
            (RedisTLS(caFile: fixture.client.keyPath), "SIWA_REDIS_TLS_CA_FILE"),
            (
                RedisTLS(
                    caFile: fixture.authority.caCertificatePath, certificateFile: fixture.client.keyPath,
                    keyFile: fixture.client.keyPath), "SIWA_REDIS_TLS_CERT_FILE"
            ),
            (
                RedisTLS(
                    caFile: fixture.authority.caCertificatePath, certificateFile: fixture.client.certificatePath,
                    keyFile: fixture.expired.keyPath), "SIWA_REDIS_TLS_KEY_FILE"
            ),
        ]
        for (tls, setting) in cases {
            #expect {
                try tls.check()
            } throws: { error in
                // SIWARedis names no setting: the field says which file, the application names it.
                (error as? RedisError)?.code == .tlsRefused && (error as? RedisError)?.field?.setting == setting
                    && (error as? RedisError)?.message.contains("SIWA_") == false
                    && (error as? RedisError)?.operatorMessage.hasPrefix("\(setting): ") == true
            }
        }
        #expect(throws: Never.self) { try fixture.clientTLS.check() }
    }
}
