import Foundation
import SIWARedis
import Synchronization
import Testing

/// An address a `+switch-master` announced as the old primary is refused for
/// `RedisPrimaryLocator.demotedPeriod` even when every sentinel still names it, then used again:
/// real sentinels (which name the primary they monitor), the locator told of a switch away from
/// it, and an injected clock moved past the period. Deterministic: no failover is waited for.
@Suite("Redis Sentinel: an announced old primary is refused for its period", .serialized)
struct SentinelDemotedTests {
    @Test("named by every sentinel after a switch away from it: refused for 60 s on the clock, then used")
    func announcedOldPrimaryRefusedThenUsed() throws {
        let cluster = try RedisSentinelCluster(downAfterMilliseconds: 5000)
        defer { cluster.shutdown() }
        let start = ContinuousClock.now
        let clock = Mutex(start)
        let events = Mutex<[RedisPrimaryLocator.Event]>([])
        let sentinels = cluster.sentinels.map { RedisPrimaryLocator.Sentinel(host: "127.0.0.1", port: $0.port) }
        let locator = RedisPrimaryLocator(
            sentinels: sentinels, masterName: RedisSentinelCluster.masterName, sentinelPassword: nil,
            timeout: .seconds(2), observer: { event in events.withLock { $0.append(event) } },
            now: { clock.withLock { $0 } })
        let named = RedisPrimaryLocator.Primary(host: "127.0.0.1", port: cluster.initialPrimary.port)
        let elsewhere = RedisPrimaryLocator.Primary(host: "127.0.0.1", port: 1)
        locator.switchAnnounced(by: sentinels[0], old: named, new: elsewhere)
        locator.forget(elsewhere)
        let confirmations = Mutex(0)
        let confirm: RedisPrimaryLocator.Confirmation = { _ in
            confirmations.withLock { $0 += 1 }
            return .master
        }

        // Just inside the period: every sentinel names the announced old primary; none is used,
        // and its ROLE is not even asked.
        clock.withLock { $0 = start + RedisPrimaryLocator.demotedPeriod - .milliseconds(1) }
        #expect(throws: RedisError.self) { try locator.discover(confirmingWith: confirm) }
        #expect(locator.current == nil)
        #expect(confirmations.withLock { $0 } == 0)
        #expect(
            events.withLock { $0 }.contains {
                if case .sentinelNamedDemoted(_, let primary) = $0 { return primary == named }
                return false
            })

        // Past the period it is an address like any other.
        clock.withLock { $0 = start + RedisPrimaryLocator.demotedPeriod + .milliseconds(1) }
        let found = try locator.discover(confirmingWith: confirm)
        #expect(found.primary == named)
        #expect(locator.current == named)
        #expect(confirmations.withLock { $0 } == 1)
    }
}
