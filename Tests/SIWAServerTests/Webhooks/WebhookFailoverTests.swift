import Foundation
import Glibc
import SIWARedis
import Testing

@testable import SIWAServer

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
            // A replica has them before anything is killed.
            _ = try connection.command("WAIT", "1", "500")
        }
        try write(1...10, port: primary.port)
        #expect(waitUntil(timeout: 10) { Set(receiver.ids()).count == 10 })
        primary.kill()
        let promoted = try #require(cluster.waitForFailover(from: primary.port, timeout: 30))
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
}
