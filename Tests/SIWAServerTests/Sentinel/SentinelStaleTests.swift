import Foundation
import SIWARedis
import Synchronization
import Testing

/// A real sentinel that names a replica (one configured with an old primary's address,
/// which no failover has corrected), listed before the healthy sentinels: its answer fails
/// `ROLE`, it goes to the back of the list, and the next sentinel is asked in the same
/// discovery, at start (before the start-up check) and in the connection code.
@Suite("Redis Sentinel: a stale sentinel listed first", .serialized)
struct SentinelStaleTests {
    static func sentinel(_ node: RedisSentinelCluster.Node) -> RedisPrimaryLocator.Sentinel {
        RedisPrimaryLocator.Sentinel(host: "127.0.0.1", port: node.port)
    }

    static func primary(_ node: RedisSentinelCluster.Node) -> RedisPrimaryLocator.Primary {
        RedisPrimaryLocator.Primary(host: "127.0.0.1", port: node.port)
    }

    @Test(
        "a connection: the replica a stale sentinel names is refused, the next sentinel asked, the write on the primary"
    )
    func connectionSkipsAStaleSentinel() throws {
        let cluster = try RedisSentinelCluster()
        defer { cluster.shutdown() }
        let replica = cluster.dataNodes[1]
        let stale = Self.sentinel(try cluster.startStaleSentinel(naming: replica.port))
        let healthy = Self.sentinel(cluster.sentinels[0])
        let events = Mutex<[RedisPrimaryLocator.Event]>([])
        let locator = RedisPrimaryLocator(
            sentinels: [stale, healthy], masterName: RedisSentinelCluster.masterName, sentinelPassword: nil,
            timeout: .seconds(2), observer: { event in events.withLock { $0.append(event) } })
        // The URL's host and port are not used with a locator: port 1 would refuse.
        let connection = RedisConnection(
            endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)), connectTimeout: .seconds(1),
            commandTimeout: .seconds(2), locator: .sentinel(locator))

        #expect(try connection.command("SET", "siwa-stale-test", "written").string == "OK")
        #expect(connection.primary == Self.primary(cluster.initialPrimary))
        #expect(
            try cluster.connection(port: cluster.initialPrimary.port).command("GET", "siwa-stale-test").string
                == "written")
        #expect(locator.discoveries == 1)
        #expect(locator.staleAnswers == 1)
        #expect(locator.sentinels == [healthy, stale])
        #expect(
            events.withLock { $0 } == [
                .sentinelNamedNonPrimary(sentinel: stale, primary: Self.primary(replica), role: .other("slave")),
                .primaryFound(sentinel: healthy, primary: Self.primary(cluster.initialPrimary), previous: nil),
            ])

        // Another connection of the process uses the confirmed primary: the sentinels are not asked again.
        let second = RedisConnection(
            endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)), connectTimeout: .seconds(1),
            commandTimeout: .seconds(2), locator: .sentinel(locator))
        #expect(try second.command("GET", "siwa-stale-test").string == "written")
        #expect(locator.discoveries == 1)
    }

    @Test(
        "serve: the stale sentinel listed first is logged with the replica it named and its ROLE; the start check and the writes go to the primary"
    )
    func serveSkipsAStaleSentinel() throws {
        // No failover wanted, and exact counts read: 5 s before a silent primary is down.
        let cluster = try RedisSentinelCluster(downAfterMilliseconds: 5000)
        defer { cluster.shutdown() }
        let replica = cluster.dataNodes[1]
        let staleNode = try cluster.startStaleSentinel(naming: replica.port)
        let stale = Self.sentinel(staleNode)
        let healthy = Self.sentinel(cluster.sentinels[0])
        let stack = try ServeStack(extraEnvironment: [
            "SIWA_REDIS_SENTINELS": "127.0.0.1:\(staleNode.port)," + cluster.sentinelList,
            "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
        ])
        defer { stack.shutdown() }
        let serve = try #require(stack.serve)

        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.stale.a"))
        #expect(response.status == 200)
        #expect(response.jsonFields["status"] == "applied")
        #expect(
            try cluster.connection(port: cluster.initialPrimary.port)
                .command("HGET", "siwa:user:{\(ServeStack.clientID):001.stale.a}", "last_event_type").string
                == "consent-revoked")

        // One line says which sentinel named which address and what its ROLE was; the next
        // line says which sentinel named the primary, in the same (the only) discovery.
        let staleLines = serve.logLines(event: "redis_sentinel_stale")
        #expect(staleLines.count == 1, "\(serve.logText)")
        let staleLine = staleLines.first ?? ""
        #expect(staleLine.contains(#""sentinel":"\#(stale)""#), "\(staleLine)")
        #expect(staleLine.contains(#""named":"127.0.0.1:\#(replica.port)""#), "\(staleLine)")
        #expect(staleLine.contains(#""role":"slave""#), "\(staleLine)")
        let found = serve.logLines(event: "redis_primary_found")
        #expect(found.count == 1)
        #expect(found.first?.contains(#""sentinel":"\#(healthy)""#) == true, "\(found)")
        #expect(found.first?.contains(#""primary":"127.0.0.1:\#(cluster.initialPrimary.port)""#) == true)

        // The start-up check ran its probe script on the confirmed primary, never on the replica.
        let replicaStats = try cluster.connection(port: replica.port).command("INFO", "commandstats").string ?? ""
        #expect(!replicaStats.contains("cmdstat_eval"), "\(replicaStats)")
        #expect(!replicaStats.contains("cmdstat_script"), "\(replicaStats)")
        let primaryStats =
            try cluster.connection(port: cluster.initialPrimary.port).command("INFO", "commandstats").string ?? ""
        #expect(primaryStats.contains("cmdstat_eval"), "\(primaryStats)")

        let health = try stack.health()
        #expect(health.status == 200)
        #expect(health.jsonFields["redis_primary"] == "127.0.0.1:\(cluster.initialPrimary.port)")
        let metrics = String(decoding: try stack.request("GET", "/metrics").body, as: UTF8.self)
        #expect(metrics.contains("\nsiwa_redis_sentinel_discoveries_total 1\n"), "\(metrics)")
        #expect(metrics.contains("\nsiwa_redis_sentinel_stale_answers_total 1\n"), "\(metrics)")
    }
}
