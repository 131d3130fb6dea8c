import Foundation
import SIWARedis
import SIWASupport
import Synchronization
import Testing

/// `+switch-master` moves every connection of the process: a real cluster, the watchers
/// subscribed to the three real sentinels, and a connection left idle on the primary while
/// it is paused past the failover. Once it resumes it still says master, yet that connection
/// sends it nothing more: its next command is refused before it is sent, and the one after
/// runs on the new primary.
@Suite("Redis Sentinel: +switch-master moves every connection", .serialized)
struct SentinelSwitchTests {
    /// `calls` of one command in a node's `INFO commandstats` (0 when never called).
    static func calls(_ command: String, on port: Int, in cluster: RedisSentinelCluster) throws -> Int {
        let stats = try cluster.connection(port: port).command("INFO", "commandstats").string ?? ""
        guard let line = stats.split(separator: "\r\n").first(where: { $0.hasPrefix("cmdstat_\(command):") }),
            let field = line.split(separator: ",").first(where: { $0.contains("calls=") && !$0.contains("_calls") }),
            let value = Int(field.split(separator: "=").last ?? "")
        else { return 0 }
        return value
    }

    @Test("an idle connection on the paused old primary sends it nothing after +switch-master; the watchers stop")
    func idleConnectionLeavesTheOldPrimary() throws {
        let cluster = try RedisSentinelCluster(downAfterMilliseconds: 1000)
        defer { cluster.shutdown() }
        let events = Mutex<[RedisPrimaryLocator.Event]>([])
        let locator = RedisPrimaryLocator(
            sentinels: cluster.sentinels.map { RedisPrimaryLocator.Sentinel(host: "127.0.0.1", port: $0.port) },
            masterName: RedisSentinelCluster.masterName, sentinelPassword: nil, timeout: .seconds(1),
            observer: { event in events.withLock { $0.append(event) } })
        let services = ServiceGroup()
        for sentinel in locator.sentinels {
            services.start(RedisSentinelWatcher(sentinel: sentinel, locator: locator, readInterval: .milliseconds(500)))
        }
        var stopped = false
        defer { if !stopped { services.stop(until: .now + .seconds(10)) } }
        func connection() -> RedisConnection {
            RedisConnection(
                endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)), connectTimeout: .seconds(1),
                commandTimeout: .milliseconds(500), locator: .sentinel(locator))
        }
        let idle = connection()
        let old = cluster.initialPrimary
        #expect(try idle.command("SET", "siwa-switch-test", "before").string == "OK")
        #expect(idle.primary == RedisPrimaryLocator.Primary(host: "127.0.0.1", port: old.port))
        let setsOnOldBefore = try Self.calls("set", on: old.port, in: cluster)

        old.pause()
        let announced = waitUntil(timeout: 30, interval: .milliseconds(20)) {
            events.withLock { events in
                events.contains {
                    if case .switchAnnounced(_, let from, _) = $0 { return from.port == old.port }
                    return false
                }
            }
        }
        old.resume()
        try #require(announced, "no +switch-master within 30 s: \(events.withLock { $0 })")
        let new = try #require(locator.current)
        #expect(new.port != old.port)

        // The idle connection's next command is refused before it is sent: the primary changed.
        #expect {
            try idle.command("SET", "siwa-switch-test", "after")
        } throws: { error in
            (error as? RedisError)?.code == .connectionLost
        }
        #expect(try Self.calls("set", on: old.port, in: cluster) == setsOnOldBefore)
        // The command after runs on the new primary.
        #expect(try idle.command("SET", "siwa-switch-test", "after").string == "OK")
        #expect(idle.primary == new)
        #expect(try cluster.connection(port: new.port).command("GET", "siwa-switch-test").string == "after")
        #expect(try Self.calls("set", on: old.port, in: cluster) == setsOnOldBefore)

        // The watchers are services: asked to stop, each returns within its read interval.
        stopped = true
        #expect(services.stop(until: .now + .seconds(10)))
    }
}
