import Foundation
import SIWARedis
import Testing

/// Sentinel with TLS everywhere: a primary, two replicas and three sentinels, every one
/// listening with TLS only (`--port 0 --tls-port`) and replicating over TLS
/// (`tls-replication yes`); the real `serve` asks the sentinels over TLS
/// (`SIWA_REDIS_SENTINEL_TLS=yes`) and writes to the primary over TLS (`rediss://`),
/// verifying `localhost` (`SIWA_REDIS_TLS_SERVER_NAME`) on the addresses the sentinels
/// give as IPs.
@Suite("Redis over TLS: Sentinel, sentinels and data nodes", .serialized)
struct RedisTLSSentinelTests {
    @Test("applied on the primary through TLS; after the primary is SIGKILLed, applied on the new one")
    func failoverOverTLS() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let cluster = try RedisSentinelCluster(tls: fixture.goodServer)
        defer { cluster.shutdown() }
        let stack = try ServeStack(extraEnvironment: [
            "SIWA_REDIS_SENTINELS": cluster.sentinelList,
            "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
            "SIWA_REDIS_SENTINEL_TLS": "yes",
            "SIWA_REDIS_URL": "rediss://sentinel-named:6379/0",
            "SIWA_REDIS_TLS_CA_FILE": fixture.authority.caCertificatePath,
            "SIWA_REDIS_TLS_SERVER_NAME": "localhost",
            // A write a replica has not acknowledged is also spooled: none is lost with the primary.
            "SIWA_REDIS_MIN_REPLICAS": "1", "SIWA_REDIS_REPLICA_TIMEOUT_MS": "100",
        ])
        defer { stack.shutdown() }
        let primary = cluster.initialPrimary
        let first = try stack.post(try stack.body(type: "consent-revoked", sub: "001.tls.sentinel.a"))
        #expect(first.jsonFields["status"] == "applied", "\(first.bodyText) \(stack.serve?.logText ?? "")")
        #expect(
            try cluster.connection(port: primary.port).command(
                "HGET", "siwa:user:{\(ServeStack.clientID):001.tls.sentinel.a}", "last_event_type"
            ).string == "consent-revoked")
        #expect(try stack.redisSnapshot() == [], "serve wrote to the stack's plain Redis")

        primary.kill()
        let promoted = try #require(
            cluster.waitForFailover(from: primary.port, timeout: 60), "no replica was promoted within 60 s")
        // As Apple would: a non-applied answer is posted again, a bounded number of times.
        var outcome: String?
        let body = try stack.body(type: "consent-revoked", sub: "001.tls.sentinel.b")
        #expect(
            try stack.waitUntil(timeout: 30) {
                outcome = try stack.post(body).jsonFields["status"]
                return outcome == "applied" || outcome == "duplicate"
            }, "last answer: \(outcome ?? "none")")
        let current = cluster.currentPrimaryFromSentinels() ?? promoted.port
        let connection = cluster.connection(port: current)
        for sub in ["001.tls.sentinel.a", "001.tls.sentinel.b"] {
            let exists = try stack.waitUntil(timeout: 20) {
                try connection.command("EXISTS", "siwa:user:{\(ServeStack.clientID):\(sub)}").integer == 1
            }
            #expect(exists, "\(sub) is not on the new primary")
        }
    }

    @Test(
        "sentinels whose certificate is refused (another CA): serve --check exit 3 with one redis_tls_refused line naming SIWA_REDIS_TLS_CA_FILE; serve starts, spools, /healthz 503 naming redis_tls_refused"
    )
    func refusedSentinelsAtStart() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let cluster = try RedisSentinelCluster(tls: fixture.goodServer)
        defer { cluster.shutdown() }
        let stack = try ServeStack(
            extraEnvironment: [
                "SIWA_REDIS_URL": "rediss://sentinel-named:6379/0",
                "SIWA_REDIS_SENTINELS": cluster.sentinelList,
                "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
                "SIWA_REDIS_SENTINEL_TLS": "yes",
                "SIWA_REDIS_TLS_CA_FILE": fixture.otherAuthority.caCertificatePath,
                "SIWA_REDIS_TLS_SERVER_NAME": "localhost",
            ], startingServe: false)
        defer { stack.shutdown() }
        let check = try CommandRun.endpoint(["serve", "--check"], environment: stack.environment)
        #expect(check.status == 3, "\(check.errors)")
        let lines = check.errors.split(separator: "\n").map(String.init)
        #expect(lines.count == 1, "\(check.errors)")
        let line = lines.first ?? ""
        #expect(line.contains(#""event":"redis_tls_refused""#), "\(line)")
        #expect(line.contains(#""setting":"SIWA_REDIS_TLS_CA_FILE""#), "\(line)")
        // The other CA's chain is sent whole: OpenSSL meets its self-signed root.
        #expect(line.contains(#""reason":"self-signed certificate in certificate chain""#), "\(line)")
        #expect(line.contains("SIWA_REDIS_SENTINEL_TLS"), "\(line)")

        try stack.startServe()
        let answer = try stack.post(try stack.body(type: "consent-revoked", sub: "001.sentinel.tls.refused"))
        #expect(answer.status == 200 && answer.jsonFields["status"] == "spooled", "\(answer.bodyText)")
        let health = try stack.health()
        #expect(health.status == 503)
        #expect(
            health.jsonFields["redis_tls_refused"]?.contains("self-signed certificate in certificate chain") == true,
            "\(health.bodyText)")
        #expect(try cluster.connection(port: cluster.initialPrimary.port).command("DBSIZE").integer == 0)
    }
}
