import Foundation
import SIWARedis
import SIWAServer
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
            cluster.waitForFailover(from: primary.port, timeout: 30), "no replica was promoted within 30 s")
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
        "sentinels whose certificate is refused (another CA): serve stops at start, exit 2, naming SIWA_REDIS_SENTINEL_TLS"
    )
    func refusedSentinelsAtStart() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let cluster = try RedisSentinelCluster(tls: fixture.goodServer)
        defer { cluster.shutdown() }
        let environment = SpoolDeadEndTests.serveEnvironment(redisURL: "rediss://sentinel-named:6379/0").merging([
            "SIWA_REDIS_SENTINELS": cluster.sentinelList,
            "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
            "SIWA_REDIS_SENTINEL_TLS": "yes",
            "SIWA_REDIS_TLS_CA_FILE": fixture.otherAuthority.caCertificatePath,
            "SIWA_REDIS_TLS_SERVER_NAME": "localhost",
        ]) { _, tls in tls }
        let result = try CommandRun.endpoint(["serve"], environment: environment)
        #expect(result.status == 2, "\(result.errors)")
        let lines = result.errors.split(separator: "\n").filter { $0.hasPrefix("{") }
        #expect(lines.count == 1, "\(result.errors)")
        let line = String(lines.first ?? "")
        #expect(line.contains(#""event":"configuration_invalid""#))
        #expect(line.contains(#""setting":"SIWA_REDIS_SENTINEL_TLS""#), "\(line)")
        #expect(line.contains("the certificate was refused"), "\(line)")
        #expect(!result.errors.contains(#""event":"started""#))
        #expect(try cluster.connection(port: cluster.initialPrimary.port).command("DBSIZE").integer == 0)
    }
}
