import SIWARedis

/// `P:clients`, a hash: per configured client ID, `last_notification:<client_id>` (ms, the
/// last genuine notification a node recorded; written at most once a minute per node) and
/// `served_since:<client_id>` (ms, when an endpoint first served it). The silence figures
/// read it at start, so a restart or another node does not make an old silence look new.
/// Not part of the contract app servers read: the endpoint's own bookkeeping.
extension NotificationStore {
    /// What `P:clients` holds for one client ID.
    public struct ClientActivity: Sendable, Equatable {
        public var lastNotificationAt: Int64?
        public var servedSince: Int64?

        public init(lastNotificationAt: Int64? = nil, servedSince: Int64? = nil) {
            self.lastNotificationAt = lastNotificationAt
            self.servedSince = servedSince
        }
    }

    /// Records a genuine notification for `clientID` at `at` (ms): never moves it back.
    public func recordClientNotification(clientID: String, at: Int64) throws(RedisError) {
        let field = "last_notification:" + clientID
        // A script keeps the later of two nodes' times (HSET alone could move it back).
        _ = try connection.command(
            "EVAL",
            "local v = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') if tonumber(ARGV[2]) > v then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end return 1",
            "1", keys.clients, field, String(at))
    }

    /// Marks the client IDs served from `now` (ms) when no endpoint did before, then reads
    /// what `P:clients` holds for them.
    public func clientActivity(clientIDs: [String], now: Int64) throws(RedisError) -> [String: ClientActivity] {
        for id in clientIDs {
            _ = try connection.command("HSETNX", keys.clients, "served_since:" + id, String(now))
        }
        guard let reply = try connection.command("HGETALL", keys.clients).array else {
            throw RedisError(.unexpectedReply, "HGETALL did not return an array")
        }
        var activity: [String: ClientActivity] = [:]
        var index = 0
        while index + 1 < reply.count {
            defer { index += 2 }
            guard let field = reply[index].string, let value = reply[index + 1].string.flatMap({ Int64($0) }) else {
                continue
            }
            if field.hasPrefix("last_notification:") {
                activity[String(field.dropFirst("last_notification:".count)), default: .init()].lastNotificationAt =
                    value
            } else if field.hasPrefix("served_since:") {
                activity[String(field.dropFirst("served_since:".count)), default: .init()].servedSince = value
            }
        }
        return activity
    }
}
