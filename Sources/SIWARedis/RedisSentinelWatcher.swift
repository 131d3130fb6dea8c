import SIWASupport
import Synchronization

/// Listens to one sentinel's `+switch-master` events, as Redis' guidelines for Sentinel
/// clients ask, and tells the locator at once: every connection leaves the old primary
/// before its next command (see `RedisPrimaryLocator.generation`), instead of writing to it
/// until the sentinels demote it (their INFO period, about 10 s) and it drops those writes
/// when it resynchronises from the new primary.
///
/// `serve` runs one per sentinel, so a sentinel that is down or cut off does not hide a
/// failover the others announce. The subscription reads with a short timeout so that a stop
/// is noticed within `readInterval`; each timeout subscribes again (a new connection), and
/// the other sentinels' subscriptions cover that instant.
public final class RedisSentinelWatcher: Service {
    public let sentinel: RedisPrimaryLocator.Sentinel
    private let locator: RedisPrimaryLocator
    private let readInterval: Duration
    private let stopped = Latch()

    public var name: String { "sentinel-watch \(sentinel)" }

    /// `readInterval` bounds each wait for an event, so also how long a stop takes.
    public init(
        sentinel: RedisPrimaryLocator.Sentinel, locator: RedisPrimaryLocator, readInterval: Duration = .seconds(1)
    ) {
        self.sentinel = sentinel
        self.locator = locator
        self.readInterval = readInterval
    }

    public func requestStop() { stopped.open() }

    public func run() {
        var failing = false
        while !stopped.hasOpened {
            let connection = RedisConnection(
                endpoint: locator.endpoint(of: sentinel), connectTimeout: locator.timeout,
                commandTimeout: readInterval)
            var subscribed = false
            do {
                _ = try connection.command("SUBSCRIBE", "+switch-master", "+sdown", "+odown", "+try-failover")
                subscribed = true
                if failing {
                    failing = false
                    locator.observer?(.sentinelWatchRestored(sentinel: sentinel))
                }
                while !stopped.hasOpened {
                    handle(try connection.nextPushedReply())
                }
            } catch  where subscribed && error.code == .timedOut {
                // No event within readInterval: subscribe again (and notice a stop).
                continue
            } catch {
                if !failing {
                    failing = true
                    locator.observer?(.sentinelWatchFailed(sentinel: sentinel, message: error.message))
                }
                // A sentinel that is down: try again after a pause, or stop.
                stopped.wait(until: .now + readInterval)
            }
        }
    }

    /// `message +switch-master "<master> <old-ip> <old-port> <new-ip> <new-port>"`, and
    /// `message +sdown|+odown|+try-failover "master <master> <ip> <port> ..."` (the `+sdown` of
    /// a replica or a sentinel starts with another word and is ignored).
    private func handle(_ reply: RedisReply) {
        guard let parts = reply.array, parts.count == 3, parts[0].string == "message",
            let channel = parts[1].string, let text = parts[2].string
        else { return }
        let fields = text.split(separator: " ").map(String.init)
        if channel == "+sdown" || channel == "+odown" || channel == "+try-failover" {
            guard fields.count >= 4, fields[0] == "master", fields[1] == locator.masterName, let port = Int(fields[3])
            else { return }
            locator.failoverSuspected(
                by: sentinel, primary: RedisPrimaryLocator.Primary(host: fields[2], port: port), event: channel)
            return
        }
        guard channel == "+switch-master" else { return }
        guard fields.count == 5, fields[0] == locator.masterName, let oldPort = Int(fields[2]),
            let newPort = Int(fields[4])
        else { return }
        locator.switchAnnounced(
            by: sentinel, old: RedisPrimaryLocator.Primary(host: fields[1], port: oldPort),
            new: RedisPrimaryLocator.Primary(host: fields[3], port: newPort))
    }
}
