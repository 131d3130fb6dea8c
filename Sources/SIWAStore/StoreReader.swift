import SIWARedis

/// The reads the operator commands make of the contract's keys (docs/contract.md): a hash's
/// fields, a stream's entries, a consumer group's pending deliveries, the notifications
/// channel. The commands name the keys through `RedisKeyLayout` and ask here; none of them
/// writes a Redis command of its own.
public struct StoreReader {
    /// One stream entry: its ID (`<ms>-<seq>`) and its fields.
    public typealias Entry = (id: String, fields: [String: String])

    /// One entry delivered to a consumer group and not acknowledged yet.
    public struct PendingDelivery: Sendable, Equatable {
        public let id: String
        /// The consumer it was delivered to.
        public let consumer: String?
        /// How many times it was delivered.
        public let deliveries: Int
    }

    public let connection: RedisConnection

    public init(connection: RedisConnection) { self.connection = connection }

    /// A hash's fields (HGETALL); empty when the key does not exist.
    public func hash(_ key: String) throws(RedisError) -> [String: String] {
        try connection.command("HGETALL", key).fieldMap ?? [:]
    }

    /// One field of a hash (HGET); nil when the field or the key does not exist.
    public func field(_ field: String, of key: String) throws(RedisError) -> String? {
        try connection.command("HGET", key, field).string
    }

    /// The entries of `stream` from `start` to `end`, oldest first (XRANGE: `-` and `+` are the
    /// ends, a `(` before an ID leaves that entry out), at most `limit` when given.
    public func entries(of stream: String, from start: String, to end: String, limit: Int? = nil)
        throws(RedisError) -> [Entry]
    {
        guard let limit else { return Self.parseEntries(try connection.command("XRANGE", stream, start, end)) }
        return Self.parseEntries(try connection.command("XRANGE", stream, start, end, "COUNT", String(limit)))
    }

    /// The newest `count` entries of `stream`, newest first (XREVRANGE).
    public func newestEntries(of stream: String, count: Int64) throws(RedisError) -> [Entry] {
        Self.parseEntries(try connection.command("XREVRANGE", stream, "+", "-", "COUNT", String(count)))
    }

    /// The entries of `stream` delivered to `group` and not acknowledged, oldest first, at most
    /// `limit` (XPENDING's extended form).
    public func pendingDeliveries(of stream: String, group: String, limit: Int) throws(RedisError)
        -> [PendingDelivery]
    {
        let delivered = try connection.command("XPENDING", stream, group, "-", "+", String(limit)).array ?? []
        return delivered.compactMap { item in
            guard let parts = item.array, parts.count == 4, let id = parts[0].string else { return nil }
            return PendingDelivery(id: id, consumer: parts[1].string, deliveries: Int(parts[3].integer ?? 0))
        }
    }

    /// Subscribes this connection to `channel`; what is published there then arrives
    /// through `connection.nextPushedReply()`.
    public func subscribe(_ channel: String) throws(RedisError) {
        _ = try connection.command("SUBSCRIBE", channel)
    }

    /// `[[id, [field, value, ...]], ...]`; an entry whose fields cannot be read has none.
    public static func parseEntries(_ reply: RedisReply) -> [Entry] {
        (reply.array ?? []).compactMap { entry in
            guard let parts = entry.array, parts.count == 2, let id = parts[0].string else { return nil }
            return (id, parts[1].fieldMap ?? [:])
        }
    }
}
