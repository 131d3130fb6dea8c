import Foundation
import SIWARedis
import SIWASupport
import Synchronization
import Testing

/// The watcher itself, against a real server that publishes what a sentinel publishes:
/// `+sdown`, `+odown` and `+try-failover` about the master in use drop it (every connection
/// asks the sentinels again); the same events about a replica, a sentinel, another master
/// name or another address change nothing. A plain redis-server stands in for the sentinel:
/// the watcher only subscribes, and `PUBLISH` sends the exact messages a sentinel sends, in
/// an order the test chooses (a real failover cannot be made to announce a replica's
/// `+sdown` on cue).
@Suite("Redis Sentinel: the watcher's +sdown, +odown and +try-failover", .serialized)
struct SentinelWatcherEventTests {
    static let masterName = "siwa-watched"

    /// The server's pub/sub clients (`CLIENT LIST TYPE pubsub`), by id.
    static func subscriberIDs(_ connection: RedisConnection) throws -> [String] {
        let list = try connection.command("CLIENT", "LIST", "TYPE", "pubsub").string ?? ""
        return list.split(separator: "\n").compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("id=") }.map(String.init)
        }
    }

    @Test(
        "each event about the master in use drops it; about a replica, a sentinel, another master or address, nothing"
    )
    func eventsAboutTheMasterInUseOnly() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let publisher = server.unixSocketConnection()
        let sentinel = RedisPrimaryLocator.Sentinel(host: "127.0.0.1", port: server.port)
        let events = Mutex<[RedisPrimaryLocator.Event]>([])
        let locator = RedisPrimaryLocator(
            sentinels: [sentinel], masterName: Self.masterName, sentinelPassword: nil, timeout: .seconds(1),
            observer: { event in events.withLock { $0.append(event) } })
        let services = ServiceGroup()
        // The read interval is long beside a round (a few milliseconds): the watcher rarely
        // subscribes again in the middle of one, and a round it did is played again (below).
        services.start(RedisSentinelWatcher(sentinel: sentinel, locator: locator, readInterval: .seconds(3)))
        defer { _ = services.stop(until: .now + .seconds(10)) }

        let inUse = RedisPrimaryLocator.Primary(host: "127.0.0.1", port: 7001)
        let replica = RedisPrimaryLocator.Primary(host: "127.0.0.1", port: 7002)
        let aboutTheMaster = "master \(Self.masterName) 127.0.0.1 \(inUse.port)"
        // What a sentinel publishes about other instances, each naming the address in use
        // somewhere, so a watcher that read the wrong field would drop it.
        let ignored = [
            // A replica of the master in use went down (its own address, then "@ <master> ...").
            "slave 127.0.0.1:\(replica.port) 127.0.0.1 \(replica.port) @ \(Self.masterName) 127.0.0.1 \(inUse.port)",
            // A replica at the address in use (an old primary that came back as a replica).
            "slave 127.0.0.1:\(inUse.port) 127.0.0.1 \(inUse.port) @ \(Self.masterName) 127.0.0.1 \(replica.port)",
            // Another sentinel of this master.
            "sentinel 0123456789abcdef 127.0.0.1 26379 @ \(Self.masterName) 127.0.0.1 \(inUse.port)",
            // Another master name watched by the same sentinels, at the same address.
            "master other-\(Self.masterName) 127.0.0.1 \(inUse.port)",
            "master \(Self.masterName)-2 127.0.0.1 \(inUse.port)",
            // This master, at another address than the one in use.
            "master \(Self.masterName) 127.0.0.1 \(replica.port)",
            "master \(Self.masterName) 127.0.0.2 \(inUse.port)",
            // Cut short, and a port that is not a number.
            "master \(Self.masterName) 127.0.0.1",
            "master \(Self.masterName) 127.0.0.1 port",
        ]
        #expect(
            try waitUntil(timeout: 10) {
                try publisher.command("PUBSUB", "NUMSUB", "+try-failover").array?.last?.integer == 1
            }, "the watcher did not subscribe")

        // Each round publishes the ignored messages on one channel, then the event about the
        // master in use on another: the drop, when it comes, names the second channel only if
        // none of the first dropped the primary. Each channel is the second one once.
        let channels = ["+sdown", "+odown", "+try-failover"]
        for (index, channel) in channels.enumerated() {
            let marker = channels[(index + 1) % channels.count]
            var played = false
            for _ in 0..<3 where !played {
                // The master in use, as a +switch-master leaves it.
                locator.switchAnnounced(
                    by: sentinel, old: RedisPrimaryLocator.Primary(host: "127.0.0.1", port: 7009), new: inUse)
                try #require(locator.current == inUse)
                events.withLock { $0.removeAll() }
                try #require(
                    waitUntil(timeout: 10) { try Self.subscriberIDs(publisher).count == 1 },
                    "the watcher did not subscribe again")
                let subscriber = try Self.subscriberIDs(publisher)
                var delivered = true
                for text in ignored {
                    delivered = try delivered && publisher.command("PUBLISH", channel, text).integer == 1
                }
                delivered =
                    try delivered && publisher.command("PUBLISH", marker, "\(aboutTheMaster) #quorum 2/2").integer == 1
                // Read in order by one connection: once the last one has dropped the primary,
                // each ignored one before it was handled.
                let dropped = waitUntil(timeout: 10) { locator.current == nil }
                // A round the watcher subscribed again in the middle of is played again: an
                // ignored message it never read would prove nothing.
                guard delivered, try Self.subscriberIDs(publisher) == subscriber else { continue }
                played = true
                #expect(dropped, "\(marker) about the master in use did not drop it")
                #expect(
                    events.withLock { $0 }
                        == [.failoverSuspected(sentinel: sentinel, primary: inUse, event: marker)],
                    "after the ignored \(channel) messages")
            }
            // Also what a watcher that ignores the event looks like: nothing dropped, then its read
            // times out and it subscribes again, in every round.
            #expect(played, "\(marker) about the master in use did not drop it in any round")
        }
    }
}
