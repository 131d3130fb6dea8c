import Foundation
import Glibc
import SIWARedis
import SIWASettings
import SIWATestKit
import Testing

/// The real `serve` finding its Redis primary through real sentinels, and refusing
/// sentinel settings that cannot work with a message that names the setting.
@Suite("Redis Sentinel: discovery and settings", .serialized)
struct SentinelSettingsTests {
    /// Serve's environment for a cluster: SIWA_REDIS_URL keeps pointing at the stack's own
    /// redis-server, which must NOT be used once sentinels are set (its host and port are ignored).
    static func environment(_ cluster: RedisSentinelCluster, extra: [String: String] = [:]) -> [String: String] {
        [
            "SIWA_REDIS_SENTINELS": cluster.sentinelList,
            "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
        ].merging(extra) { _, new in new }
    }

    /// Runs `serve` and waits (bounded) for it to exit at start: its status and its output.
    static func failedStart(_ stack: ServeStack, _ environment: [String: String]) throws -> (Int32?, String) {
        let logURL = stack.directory.appendingPathComponent("failed-start-\(UUID().uuidString).log")
        let serve = try EndpointProcess(
            ["serve"],
            environment: stack.environment.merging(environment) { _, new in new }
                .merging(["PATH": "/usr/bin:/bin"]) { current, _ in current }, standardOutput: logURL,
            standardError: logURL)
        let status = serve.waitForExit(timeout: 20)
        serve.stop()
        return (status, (try? String(contentsOf: logURL, encoding: .utf8)) ?? "")
    }

    @Test(
        "serve writes to the primary the sentinels name (not SIWA_REDIS_URL's host); /healthz names it; /metrics counts"
    )
    func discoversThePrimary() throws {
        // No failover wanted, and exact counts read: a primary a loaded machine leaves
        // unscheduled for a second must not be called down (+sdown makes serve look again).
        let cluster = try RedisSentinelCluster(downAfterMilliseconds: 5000)
        defer { cluster.shutdown() }
        // WAIT returns once both replicas acknowledge: the long timeouts (the WAIT's under the
        // command timeout, which would break the connection first) only keep a loaded machine,
        // where the replicas take longer than the default 100 ms, from counting as a shortfall.
        let stack = try ServeStack(
            extraEnvironment: Self.environment(
                cluster,
                extra: [
                    "SIWA_REDIS_MIN_REPLICAS": "2", "SIWA_REDIS_REPLICA_TIMEOUT_MS": "4000",
                    "SIWA_REDIS_TIMEOUT_MS": "5000",
                ]))
        defer { stack.shutdown() }

        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.sentinel.a"))
        #expect(response.status == 200)
        #expect(response.jsonFields["status"] == "applied")
        let primary = cluster.connection(port: cluster.initialPrimary.port)
        #expect(
            try primary.command("HGET", "siwa:user:{\(ServeStack.clientID):001.sentinel.a}", "last_event_type").string
                == "consent-revoked")
        // Both replicas acknowledged (WAIT 2): nothing was spooled.
        #expect(stack.serve?.logLines(event: "redis_replica_shortfall") == [])
        // The stack's own redis-server (SIWA_REDIS_URL's host and port) was not written to.
        #expect(try stack.redisSnapshot() == [])

        let health = try stack.health()
        #expect(health.status == 200)
        #expect(health.jsonFields["redis_primary"] == "127.0.0.1:\(cluster.initialPrimary.port)")
        #expect(health.jsonFields["spool_depth"] == "0")
        let metrics = String(decoding: try stack.request("GET", "/metrics").body, as: UTF8.self)
        #expect(metrics.contains("\nsiwa_redis_sentinel_discoveries_total 1\n"))
        #expect(metrics.contains("\nsiwa_redis_failovers_total 0\n"))
        #expect(metrics.contains("\nsiwa_redis_replica_shortfalls_total 0\n"))
    }

    @Test(
        "a planned failover (SENTINEL FAILOVER): the next notification is applied on the new primary, not the demoted one"
    )
    func followsAPlannedFailover() throws {
        let cluster = try RedisSentinelCluster()
        defer { cluster.shutdown() }
        let stack = try ServeStack(extraEnvironment: Self.environment(cluster))
        defer { stack.shutdown() }
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: "001.planned.a")).jsonFields["status"]
                == "applied")

        let oldPort = cluster.initialPrimary.port
        _ = try cluster.connection(port: cluster.sentinels[0].port).command(
            "SENTINEL", "FAILOVER", RedisSentinelCluster.masterName)
        let newPrimary = try #require(cluster.waitForFailover(from: oldPort, timeout: 60))
        // Until the sentinels demote it, the old node is still a master that takes writes
        // (lost when it resyncs, unless SIWA_REDIS_MIN_REPLICAS kept a copy): wait for that.
        #expect(
            stack.waitUntil(timeout: 20) {
                (try? cluster.connection(port: oldPort).command("ROLE"))?.array?.first?.string == "slave"
            })

        // The worker's connection still points at the demoted node: it must not stay there.
        let after = try stack.post(try stack.body(type: "consent-revoked", sub: "001.planned.b"))
        #expect(after.jsonFields["status"] == "applied")
        #expect(
            try cluster.connection(port: newPrimary.port).command(
                "HGET", "siwa:user:{\(ServeStack.clientID):001.planned.b}", "last_event_type"
            ).string == "consent-revoked")
        let health = try stack.health()
        #expect(health.jsonFields["redis_primary"] == "127.0.0.1:\(newPrimary.port)")
        let metrics = String(decoding: try stack.request("GET", "/metrics").body, as: UTF8.self)
        #expect(metrics.contains("\nsiwa_redis_failovers_total 1\n"), "\(metrics)")
    }

    @Test("sentinels unreachable at start: serve starts, spools (200), /healthz 503, Redis untouched")
    func sentinelsUnreachable() throws {
        let ports = try (0..<2).map { _ in try LoopbackPort.free() }
        let stack = try ServeStack(extraEnvironment: [
            "SIWA_REDIS_SENTINELS": ports.map { "127.0.0.1:\($0)" }.joined(separator: ","),
            "SIWA_REDIS_SENTINEL_MASTER": "mymaster",
        ])
        defer { stack.shutdown() }
        let warning = stack.serve?.logLines(event: "redis_primary_unknown").first ?? ""
        #expect(warning.contains("SIWA_REDIS_SENTINELS: no sentinel answered"), "\(stack.serve?.logText ?? "")")

        let response = try stack.post(
            try stack.body(type: "email-disabled", sub: "001.sentinel.b", email: "b@x.example"))
        #expect(response.status == 200)
        #expect(response.jsonFields["status"] == "spooled")
        let health = try stack.health()
        #expect(health.status == 503)
        #expect(health.jsonFields["redis"] == "down")
        #expect(health.jsonFields["spool_depth"] == "1")
        #expect(health.body.count > 0 && health.jsonFields["redis_primary"] == nil)
        #expect(String(decoding: health.body, as: UTF8.self).contains(#""redis_primary":null"#))
        #expect(try stack.redisSnapshot() == [])
    }

    @Test("an unknown master name, a wrong sentinel password, a missing one: serve exits 2 naming the setting")
    func refusedSettings() throws {
        let cluster = try RedisSentinelCluster(sentinelPassword: "test-sentinel-secret")
        defer { cluster.shutdown() }
        let stack = try ServeStack()
        defer { stack.shutdown() }

        let (unknownStatus, unknownLog) = try Self.failedStart(
            stack,
            Self.environment(
                cluster,
                extra: [
                    "SIWA_REDIS_SENTINEL_MASTER": "no-such-master",
                    "SIWA_REDIS_SENTINEL_PASSWORD": "test-sentinel-secret",
                ]))
        #expect(unknownStatus == 2, "\(unknownLog)")
        #expect(
            unknownLog.contains("SIWA_REDIS_SENTINEL_MASTER: no sentinel monitors a master named 'no-such-master'"),
            "\(unknownLog)")
        #expect(unknownLog.contains(#""setting":"SIWA_REDIS_SENTINEL_MASTER""#), "\(unknownLog)")

        let (wrongStatus, wrongLog) = try Self.failedStart(
            stack, Self.environment(cluster, extra: ["SIWA_REDIS_SENTINEL_PASSWORD": "not-the-password"]))
        #expect(wrongStatus == 2, "\(wrongLog)")
        #expect(wrongLog.contains("SIWA_REDIS_SENTINEL_PASSWORD: the sentinels refused it"), "\(wrongLog)")
        #expect(wrongLog.contains(#""setting":"SIWA_REDIS_SENTINEL_PASSWORD""#), "\(wrongLog)")
        #expect(!wrongLog.contains("not-the-password"))

        let (missingStatus, missingLog) = try Self.failedStart(stack, Self.environment(cluster))
        #expect(missingStatus == 2, "\(missingLog)")
        #expect(missingLog.contains("SIWA_REDIS_SENTINEL_PASSWORD: the sentinels refused it"), "\(missingLog)")

        // The right password: it starts and applies.
        stack.serve?.kill()
        let good = try ServeProcess(
            environment: stack.environment.merging(
                Self.environment(cluster, extra: ["SIWA_REDIS_SENTINEL_PASSWORD": "test-sentinel-secret"])
            ) { _, new in new },
            socketPath: stack.socketPath, logURL: stack.directory.appendingPathComponent("good.log"))
        defer { good.kill() }
        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.sentinel.c"))
        #expect(response.jsonFields["status"] == "applied")
        #expect(!good.logText.contains("test-sentinel-secret"))
    }

    @Test(
        "the data nodes refuse the URL's password: serve exits 2 naming SIWA_REDIS_URL, though ROLE could not confirm the primary"
    )
    func dataNodeLoginRefused() throws {
        let cluster = try RedisSentinelCluster()
        defer { cluster.shutdown() }
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        // The cluster's data nodes have no password: AUTH with one is refused.
        let (status, log) = try Self.failedStart(
            stack, Self.environment(cluster, extra: ["SIWA_REDIS_URL": "redis://:wrong-data-secret@127.0.0.1:1/0"]))
        #expect(status == 2, "\(log)")
        #expect(log.contains(#""setting":"SIWA_REDIS_URL""#), "\(log)")
        #expect(log.contains("AUTH"), "\(log)")
        #expect(!log.contains("wrong-data-secret"), "\(log)")
    }

    @Test("sentinel settings that cannot be used are refused by --check, naming the setting")
    func configurationErrors() throws {
        let base = ["SIWA_CLIENT_IDS": "com.example.app"]
        func problem(_ extra: [String: String]) -> String? {
            do {
                _ = try ServerConfiguration(environment: base.merging(extra) { _, new in new })
                return nil
            } catch {
                return error.description
            }
        }
        #expect(problem(["SIWA_REDIS_SENTINELS": "127.0.0.1:26379"])?.hasPrefix("SIWA_REDIS_SENTINEL_MASTER ") == true)
        #expect(problem(["SIWA_REDIS_SENTINEL_MASTER": "m"])?.hasPrefix("SIWA_REDIS_SENTINEL_MASTER ") == true)
        #expect(problem(["SIWA_REDIS_SENTINEL_PASSWORD": "p"])?.hasPrefix("SIWA_REDIS_SENTINEL_PASSWORD ") == true)
        #expect(
            problem(["SIWA_REDIS_SENTINELS": "127.0.0.1", "SIWA_REDIS_SENTINEL_MASTER": "m"])?.hasPrefix(
                "SIWA_REDIS_SENTINELS ") == true)
        #expect(
            problem(["SIWA_REDIS_SENTINELS": "127.0.0.1:0", "SIWA_REDIS_SENTINEL_MASTER": "m"])?.hasPrefix(
                "SIWA_REDIS_SENTINELS ") == true)
        #expect(problem(["SIWA_REDIS_MIN_REPLICAS": "-1"])?.hasPrefix("SIWA_REDIS_MIN_REPLICAS ") == true)
        #expect(problem(["SIWA_REDIS_REPLICA_TIMEOUT_MS": "0"])?.hasPrefix("SIWA_REDIS_REPLICA_TIMEOUT_MS ") == true)
        let configuration = try ServerConfiguration(
            environment: base.merging([
                "SIWA_REDIS_SENTINELS": "127.0.0.1:26379, [::1]:26380", "SIWA_REDIS_SENTINEL_MASTER": "m",
            ]) { _, new in new })
        #expect(
            configuration.redis.topology
                == .sentinel(
                    RedisTopology.Sentinel(
                        sentinels: [.init(host: "127.0.0.1", port: 26379), .init(host: "::1", port: 26380)],
                        masterName: "m", password: nil)))
        #expect(configuration.redis.minimumReplicas == 0)
        #expect(configuration.redis.replicaTimeout == .milliseconds(100))
    }

    @Test(
        "fewer replicas than SIWA_REDIS_MIN_REPLICAS: still 200 applied, a copy kept in the spool, logged and counted")
    func replicaShortfall() throws {
        // One redis-server with no replica at all: WAIT 1 can never be satisfied.
        let stack = try ServeStack(extraEnvironment: [
            "SIWA_REDIS_MIN_REPLICAS": "1", "SIWA_REDIS_REPLICA_TIMEOUT_MS": "50",
        ])
        defer { stack.shutdown() }
        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.shortfall"))
        #expect(response.status == 200)
        #expect(response.jsonFields["status"] == "applied")
        #expect(try stack.userHash(sub: "001.shortfall")["last_event_type"] == "consent-revoked")
        #expect(try stack.streamLength() == 1)
        let line = stack.serve?.logLines(event: "redis_replica_shortfall").first ?? ""
        #expect(line.contains(#""replicas":0"#) && line.contains(#""wanted":1"#), "\(stack.serve?.logText ?? "")")
        // The replayer finds the copy a duplicate, but no replica holds it: the copy stays.
        let metricsText = { String(decoding: try stack.request("GET", "/metrics").body, as: UTF8.self) }
        #expect(try metricsText().contains("\nsiwa_redis_replica_shortfalls_total 1\n"))
        // Waits for the replayer's own WAIT (after the request's): its pass has run.
        let waitCalls = {
            let stats = try stack.redisConnection().command("INFO", "commandstats").string ?? ""
            let line = stats.split(separator: "\r\n").first { $0.hasPrefix("cmdstat_wait:calls=") } ?? ""
            return Int(line.dropFirst("cmdstat_wait:calls=".count).prefix { $0.isNumber }) ?? 0
        }
        #expect(try stack.waitUntil(timeout: 10) { try waitCalls() >= 2 })
        #expect(try stack.health().jsonFields["spool_depth"] == "1")
        #expect(stack.serve?.logLines(event: "spool_replayed") == [])
        #expect(try stack.streamLength() == 1)
    }

    @Test("without SIWA_REDIS_MIN_REPLICAS nothing is waited for and nothing spooled")
    func noMinimumReplicas() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.nowait"))
        #expect(response.jsonFields["status"] == "applied")
        #expect(try stack.health().jsonFields["spool_depth"] == "0")
        #expect(stack.serve?.logLines(event: "redis_replica_shortfall") == [])
    }
}
