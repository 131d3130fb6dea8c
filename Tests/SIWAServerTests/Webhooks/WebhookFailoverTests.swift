import Foundation
import Glibc
import SIWARedis
import Testing

@testable import SIWAStore

/// The deliverer through a Redis failover: real redis-servers and sentinels (the Sentinel
/// suites' cluster), the primary SIGKILLed under delivery.
@Suite("Webhook delivery through a Sentinel failover", .serialized)
struct WebhookFailoverTests {
    @Test("the primary killed under delivery: every event written reaches the destination, none left pending")
    func primaryKilled() throws {
        let cluster = try RedisSentinelCluster(downAfterMilliseconds: 1000)
        defer { cluster.shutdown() }
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("ha")
        let environment = try stack.environment(
            [stack.destination("ha", receiver)],
            [
                "SIWA_REDIS_SENTINELS": cluster.sentinelList,
                "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
            ])
        let deliverer = try stack.startDeliverer(environment)
        let primary = try #require(cluster.currentPrimary())
        /// Both replicas have everything the primary wrote so far (`WAIT` counts them): the
        /// sentinels may promote either. A write first, so that the wait covers the deliverer's
        /// own writes too (WAIT waits for this connection's last write, and replication is one
        /// ordered stream).
        func replicated(on port: Int) throws {
            let connection = cluster.connection(port: port)
            _ = try connection.command("SET", "siwa-test:replication-fence", String(UUID().uuidString))
            let replicas = try connection.command("WAIT", "2", "10000").integer
            try #require(replicas == 2, "only \(replicas.map(String.init) ?? "no") replica(s) acknowledged the writes")
        }
        func write(_ ids: ClosedRange<Int>, port: Int) throws {
            let connection = cluster.connection(port: port)
            let store = NotificationStore(connection: connection)
            for index in ids {
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                _ = try store.apply(
                    .init(
                        clientID: "com.example.app", subject: "001.ha.\(index)",
                        type: .init(rawType: "consent-revoked"),
                        rawType: "consent-revoked", eventTimeMilliseconds: now, tokenID: "ha-\(index)",
                        issuedAt: now / 1000, expiresAt: nil, email: nil, isPrivateEmail: nil),
                    receivedAt: now)
            }
        }
        // startDeliverer waited for the destination's group (webhook_destination_reading): an
        // event written before it would never be this group's.
        let old = cluster.connection(port: primary.port)
        try write(1...10, port: primary.port)
        try #require(waitUntil(timeout: 10) { Set(receiver.ids()).count == 10 })
        // Delivered and acknowledged on the primary, and both on each replica before the kill: an
        // acknowledgement the failover lost would leave the event pending on the new primary
        // until SIWA_WEBHOOK_CLAIM_IDLE_MS (a minute by default), longer than this test waits.
        try #require(
            waitUntil(timeout: 10) {
                (try? old.command("XPENDING", "siwa:events", "deliver:ha").array?.first?.integer) == 0
            })
        try replicated(on: primary.port)
        primary.kill()
        let promoted = try #require(cluster.waitForFailover(from: primary.port, timeout: 60))
        try write(11...20, port: promoted.port)
        let all = Set((1...20).map { "ha-\($0)" })
        #expect(waitUntil(timeout: 30) { Set(receiver.ids()) == all })
        let check = cluster.connection(port: promoted.port)
        #expect(
            waitUntil(timeout: 10) {
                (try? check.command("XPENDING", "siwa:events", "deliver:ha").array?.first?.integer) == 0
            })
        // At least once each, always under its own id (a 2xx whose XACK the failover lost is sent again).
        #expect(receiver.ids().allSatisfy { all.contains($0) })
        #expect(receiver.ids().count >= 20)
        #expect((try deliverer.metrics()[#"siwa_webhook_delivered_total{destination="ha"}"#] ?? 0) >= 20)
    }

    @Test("Redis Cluster: the slot moved to another primary under delivery; every event arrives, none left pending")
    func clusterSlotMoved() throws {
        let cluster = try RedisClusterNodes(transport: .plain)
        defer { cluster.shutdown() }
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("slot")
        let environment = try stack.environment(
            [stack.destination("slot", receiver)],
            [
                "SIWA_KEY_PREFIX": RedisClusterNodes.keyPrefix,
                "SIWA_REDIS_CLUSTER_NODES": cluster.nodes.map { "127.0.0.1:\($0.port)" }.joined(separator: ","),
            ])
        _ = try stack.startDeliverer(environment)
        let source = try #require(cluster.slotOwnerPort())
        let target = try #require(cluster.nodes.map(\.port).first { $0 != source && cluster.role(of: $0) == "master" })
        func write(_ ids: ClosedRange<Int>) throws {
            let locator = ClusterDiscoveryTests.locator(cluster.nodes.map(\.port))
            let connection = RedisConnection(
                endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)), connectTimeout: .seconds(1),
                commandTimeout: .seconds(5), locator: .cluster(locator))
            let store = NotificationStore(connection: connection, keyPrefix: RedisClusterNodes.keyPrefix)
            for index in ids {
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                _ = try store.apply(
                    .init(
                        clientID: "com.example.app", subject: "001.slot.\(index)",
                        type: .init(rawType: "consent-revoked"), rawType: "consent-revoked", eventTimeMilliseconds: now,
                        tokenID: "slot-\(index)", issuedAt: now / 1000, expiresAt: nil, email: nil, isPrivateEmail: nil),
                    receivedAt: now)
            }
        }
        try write(1...10)
        #expect(waitUntil(timeout: 10) { Set(receiver.ids()).count == 10 })
        try cluster.migrateSlot(from: source, to: target, batchPause: 0)
        #expect(cluster.slotOwnerPort() == target)
        try write(11...20)
        let all = Set((1...20).map { "slot-\($0)" })
        #expect(waitUntil(timeout: 30) { Set(receiver.ids()) == all })
        let check = cluster.connection(port: target)
        #expect(
            waitUntil(timeout: 10) {
                (try? check.command("XPENDING", "{siwa}:events", "deliver:slot").array?.first?.integer) == 0
            })
        #expect(receiver.ids().allSatisfy { all.contains($0) })
        #expect(receiver.ids().count >= 20)
    }
}
