import Foundation
import Glibc
import SIWARedis
import SIWASettingKeys
import SIWASettings
import Testing

/// The real `serve` speaking TLS to a real TLS-only `redis-server` (`--port 0 --tls-port`,
/// `--tls-auth-clients yes`), with no sidecar: the settings `SIWA_REDIS_URL=rediss://...`,
/// `SIWA_REDIS_TLS_CA_FILE` and the client certificate and key. The test reads Redis
/// over the server's plain unix socket; the test kit's key stands in for Apple's.
@Suite("Redis over TLS, the real serve", .serialized)
struct RedisTLSServeTests {
    static func tlsEnvironment(_ fixture: RedisTLSFixture, url: String) -> [String: String] {
        [
            "SIWA_REDIS_URL": url, "SIWA_REDIS_TLS_CA_FILE": fixture.authority.caCertificatePath,
            "SIWA_REDIS_TLS_CERT_FILE": fixture.client.certificatePath,
            "SIWA_REDIS_TLS_KEY_FILE": fixture.client.keyPath,
        ]
    }

    static func requiringClients(_ files: RedisServerProcess.TLSFiles) -> RedisServerProcess.TLSFiles {
        var files = files
        files.requireClientCertificates = true
        return files
    }

    @Test(
        "applied through TLS with mutual TLS; then each refused certificate (another CA, expired, another name): spooled, nothing written, redis_tls_refused logged; applied once when a good certificate is back"
    )
    func appliedThenRefusedAtRunTime() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        // Append-only: what it holds survives the restarts with other certificates.
        let redis = try RedisServerProcess(appendOnly: true, tls: Self.requiringClients(fixture.goodServer))
        defer { redis.shutdown() }
        // A new connection for each look: Redis restarts between them.
        var inspector: RedisConnection { redis.unixSocketConnection() }
        var environment = Self.tlsEnvironment(fixture, url: redis.url())
        environment["SIWA_REDIS_RETRY_MS"] = "100"
        let stack = try ServeStack(extraEnvironment: environment)
        defer { stack.shutdown() }
        let serve = try #require(stack.serve)

        let first = try stack.post(try stack.body(type: "consent-revoked", sub: "001.tls.first"))
        #expect(first.status == 200)
        #expect(first.jsonFields["status"] == "applied")
        #expect(
            try inspector.command("HGET", "siwa:user:{\(ServeStack.clientID):001.tls.first}", "last_event_type")
                .string == "consent-revoked")
        #expect(try stack.health().status == 200)
        #expect(try stack.redisSnapshot() == [], "serve wrote to the stack's plain Redis")

        for (index, refused) in fixture.refusedServers.enumerated() {
            redis.stop()
            redis.tls = Self.requiringClients(refused.files)
            try redis.start()
            let before = try inspector.command("DBSIZE").integer
            let refusals = serve.logText.components(separatedBy: "redis_tls_refused").count
            let sub = "001.tls.refused.\(index)"
            let answer = try stack.post(try stack.body(type: "consent-revoked", sub: sub))
            #expect(answer.status == 200, "\(refused.name)")
            #expect(answer.jsonFields["status"] == "spooled", "\(refused.name): \(answer.bodyText)")
            #expect(
                stack.waitUntil(timeout: 10) {
                    serve.logText.components(separatedBy: "redis_tls_refused").count > refusals
                }, "\(refused.name): no redis_tls_refused in the log")
            #expect(try inspector.command("DBSIZE").integer == before, "\(refused.name): Redis was written")
            #expect(try inspector.command("EXISTS", "siwa:user:{\(ServeStack.clientID):\(sub)}").integer == 0)
            let health = try stack.health()
            #expect(health.status == 503, "\(refused.name)")
            // The refusal named at run time as at start: in /healthz, and a log line with the
            // reason and the setting to look at.
            #expect(
                health.jsonFields["redis_tls_refused"]?.contains(refused.reason) == true,
                "\(refused.name): \(health.bodyText)")
            #expect(
                serve.logLines(event: "redis_tls_refused").contains {
                    $0.contains(#""when":"run_time""#) && $0.contains(#""reason":"\#(refused.reason)"#)
                        && $0.contains(#""setting":"\#(refused.setting)""#)
                }, "\(refused.name): \(serve.logLines(event: "redis_tls_refused"))")

            // The good certificate again: the spooled notification is applied, once.
            redis.stop()
            redis.tls = Self.requiringClients(fixture.goodServer)
            try redis.start()
            #expect(
                try stack.waitUntil(timeout: 20) {
                    try inspector.command("EXISTS", "siwa:user:{\(ServeStack.clientID):\(sub)}").integer == 1
                }, "\(refused.name): the spooled notification was not applied: \(serve.logText.suffix(2000))")
            #expect(try inspector.command("XLEN", "siwa:events").integer == Int64(index + 2))
        }
        #expect(try stack.redisSnapshot() == [])
    }

    /// The JSON lines of a run's standard error.
    static func jsonLines(_ text: String) -> [String] {
        text.split(separator: "\n").map(String.init)
    }

    @Test(
        "at start: a certificate from another CA, an expired one, one naming another host: serve --check exit 3 with one redis_tls_refused line (the reason, the setting); serve starts, spools, /healthz 503 naming redis_tls_refused; applied once a good certificate is back, no restart"
    )
    func refusedAtStartIsAnOutage() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        for refused in fixture.refusedServers {
            let redis = try RedisServerProcess(appendOnly: true, tls: refused.files)
            defer { redis.shutdown() }
            var environment = Self.tlsEnvironment(fixture, url: redis.url())
            environment["SIWA_REDIS_RETRY_MS"] = "100"
            let stack = try ServeStack(extraEnvironment: environment, startingServe: false)
            defer { stack.shutdown() }

            let check = try CommandRun.endpoint(["serve", "--check"], environment: stack.environment)
            #expect(check.status == 3, "\(refused.name): \(check.errors)")
            let lines = Self.jsonLines(check.errors)
            #expect(lines.count == 1, "\(refused.name): \(check.errors)")
            let line = lines.first ?? ""
            #expect(line.hasPrefix("{") && line.contains(#""event":"redis_tls_refused""#), "\(refused.name): \(line)")
            #expect(line.contains(#""when":"start""#), "\(refused.name): \(line)")
            #expect(line.contains(#""reason":"\#(refused.reason)"#), "\(refused.name): \(line)")
            #expect(line.contains(#""setting":"\#(refused.setting)""#), "\(refused.name): \(line)")
            #expect(!check.output.contains("configuration_valid"), "\(refused.name)")

            // serve starts (an outage, not a setting): it spools and /healthz names the refusal.
            try stack.startServe()
            let serve = try #require(stack.serve)
            let sub = "001.tls.start.\(refused.name.split(separator: " ").last ?? "")"
            let answer = try stack.post(try stack.body(type: "consent-revoked", sub: sub))
            #expect(answer.status == 200 && answer.jsonFields["status"] == "spooled", "\(refused.name)")
            let health = try stack.health()
            #expect(health.status == 503, "\(refused.name)")
            #expect(
                health.jsonFields["redis_tls_refused"]?.contains(refused.reason) == true,
                "\(refused.name): \(health.bodyText)")
            #expect(health.jsonFields["reason"]?.contains("redis_tls_refused") == true, "\(health.bodyText)")
            #expect(serve.logLines(event: "redis_tls_refused").contains { $0.contains(#""when":"start""#) })
            #expect(!serve.logText.contains("configuration_invalid"), "\(refused.name)")
            #expect(try redis.unixSocketConnection().command("DBSIZE").integer == 0, "\(refused.name)")

            // The certificate renewed: the same serve applies what it spooled.
            redis.stop()
            redis.tls = fixture.goodServer
            try redis.start()
            #expect(
                try stack.waitUntil(timeout: 20) {
                    try redis.unixSocketConnection().command(
                        "EXISTS", "siwa:user:{\(ServeStack.clientID):\(sub)}"
                    ).integer == 1
                }, "\(refused.name): not applied after the renewal: \(serve.logText.suffix(2000))")
            #expect(try stack.waitUntil(timeout: 10) { try stack.health().status == 200 })
        }
    }

    @Test(
        "a local TLS file that cannot be used (a CA file holding a key): serve and serve --check exit 2, one configuration_invalid line naming the setting"
    )
    func unusableLocalFileIsASetting() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        // The stack's directories (removed at the end), no serve started.
        let stack = try ServeStack(
            extraEnvironment: [
                "SIWA_REDIS_URL": "rediss://localhost:1/0", "SIWA_REDIS_TLS_CA_FILE": fixture.client.keyPath,
            ], startingServe: false)
        defer { stack.shutdown() }
        for arguments in [["serve", "--check"], ["serve"]] {
            let run = try CommandRun.endpoint(arguments, environment: stack.environment)
            #expect(run.status == 2, "\(arguments): \(run.errors)")
            let lines = Self.jsonLines(run.errors)
            #expect(lines.count == 1, "\(arguments): \(run.errors)")
            #expect(lines.first?.contains(#""event":"configuration_invalid""#) == true, "\(run.errors)")
            #expect(lines.first?.contains(#""setting":"SIWA_REDIS_TLS_CA_FILE""#) == true, "\(run.errors)")
        }
    }

    @Test("TLS settings: files loaded at start (a key that is not the certificate's is refused), none without TLS on")
    func settings() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let base = ["SIWA_CLIENT_IDS": ServeStack.clientID]
        func refusal(_ extra: [String: String]) -> String? {
            do {
                _ = try ServerConfiguration(environment: base.merging(extra) { _, new in new })
                return nil
            } catch {
                return error.setting
            }
        }
        let ca = fixture.authority.caCertificatePath
        #expect(refusal(["SIWA_REDIS_TLS_CA_FILE": ca]) == "SIWA_REDIS_TLS_CA_FILE")
        #expect(refusal(["SIWA_REDIS_TLS_SERVER_NAME": "localhost"]) == "SIWA_REDIS_TLS_SERVER_NAME")
        #expect(refusal(["SIWA_REDIS_SENTINEL_TLS": "yes"]) == "SIWA_REDIS_SENTINEL_TLS")
        #expect(refusal(["SIWA_REDIS_SENTINEL_TLS": "maybe"]) == "SIWA_REDIS_SENTINEL_TLS")
        let tls = ["SIWA_REDIS_URL": "rediss://localhost:6380/0", "SIWA_REDIS_TLS_CA_FILE": ca]
        #expect(
            refusal(tls.merging(["SIWA_REDIS_TLS_CERT_FILE": fixture.client.certificatePath]) { $1 })
                == "SIWA_REDIS_TLS_KEY_FILE")
        #expect(
            refusal(
                tls.merging([
                    "SIWA_REDIS_TLS_CERT_FILE": fixture.client.certificatePath,
                    "SIWA_REDIS_TLS_KEY_FILE": fixture.expired.keyPath,
                ]) { $1 }) == "SIWA_REDIS_TLS_KEY_FILE")
        #expect(
            refusal(tls.merging(["SIWA_REDIS_TLS_CA_FILE": fixture.client.keyPath]) { $1 }) == "SIWA_REDIS_TLS_CA_FILE")
        let configuration = try ServerConfiguration(
            environment: base.merging(
                tls.merging([
                    "SIWA_REDIS_TLS_CERT_FILE": fixture.client.certificatePath,
                    "SIWA_REDIS_TLS_KEY_FILE": fixture.client.keyPath,
                ]) { $1 }
            ) { $1 })
        #expect(
            configuration.redis.endpoint.tls
                == RedisTLS(
                    caFile: ca, certificateFile: fixture.client.certificatePath, keyFile: fixture.client.keyPath))
        #expect(configuration.redis.endpoint.description == "rediss://localhost:6380/0")
    }
}
