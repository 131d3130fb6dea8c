import SIWARedis

/// What the deletions stream (`P:deletions`, one entry per `account-deleted` recorded)
/// says about the deletion duty: how many entries it holds, and per consumer group how
/// many deletions the group has not acknowledged and since when the oldest waits.
///
/// Read with a bounded number of commands whatever the stream's length: `EXISTS`, `XLEN`,
/// `XRANGE - + COUNT 1`, `XINFO GROUPS`, and per group `XPENDING` (summary) and
/// `XRANGE (last-delivered-id + COUNT 1`. Never a scan of the stream.
public struct DeletionDutyReading: Sendable, Equatable {
    public struct Group: Sendable, Equatable {
        public let name: String
        public let consumers: Int
        /// Delivered to a consumer of the group, not acknowledged yet (`XPENDING`).
        public let delivered: Int
        /// Not delivered to any consumer of the group yet (`XINFO GROUPS` lag).
        public let undelivered: Int
        /// The last entry delivered to the group ("0-0" when none).
        public let lastDeliveredID: String
        /// When the oldest deletion the group has not acknowledged was recorded (ms, from
        /// its entry ID), or nil when the group has acknowledged every one.
        public let oldestPendingAt: Int64?

        public init(
            name: String, consumers: Int, delivered: Int, undelivered: Int, lastDeliveredID: String,
            oldestPendingAt: Int64?
        ) {
            self.name = name
            self.consumers = consumers
            self.delivered = delivered
            self.undelivered = undelivered
            self.lastDeliveredID = lastDeliveredID
            self.oldestPendingAt = oldestPendingAt
        }

        /// Deletions this group has not acknowledged: its share of the unmet duty.
        public var pending: Int { delivered + undelivered }
    }

    /// Entries in the stream (acknowledged ones too, until someone trims them).
    public let entries: Int
    /// When the stream's oldest entry was recorded (ms), nil when it is empty.
    public let oldestEntryAt: Int64?
    public let groups: [Group]

    /// Most entries counted one by one when Redis cannot say a group's lag (Redis 6, or
    /// entries deleted inside the undelivered range): the count is then at most this.
    public static let countLimit = 10_000

    public init(entries: Int, oldestEntryAt: Int64?, groups: [Group]) {
        self.entries = entries
        self.oldestEntryAt = oldestEntryAt
        self.groups = groups
    }

    /// Reads the stream at `key`. A missing key is an empty stream without groups.
    public static func read(_ connection: RedisConnection, key: String) throws(RedisError) -> DeletionDutyReading {
        guard try connection.command("EXISTS", key).integer == 1 else {
            return DeletionDutyReading(entries: 0, oldestEntryAt: nil, groups: [])
        }
        let length = Int(try connection.command("XLEN", key).integer ?? 0)
        let oldest = try firstEntryID(connection, key: key, after: nil).flatMap(entryMilliseconds)
        let infos = try connection.command("XINFO", "GROUPS", key).array ?? []
        var groups: [Group] = []
        for info in infos {
            let fields = mixedFieldMap(info)
            guard case .text(let name)? = fields["name"] else {
                throw RedisError(.unexpectedReply, "XINFO GROUPS gave a group without a name")
            }
            let lastDelivered = fields["last-delivered-id"]?.text ?? "0-0"
            let summary = try connection.command("XPENDING", key, name).array ?? []
            let delivered = Int(summary.first?.integer ?? 0)
            let smallestDelivered = summary.count > 1 ? summary[1].string.flatMap(entryMilliseconds) : nil
            let undelivered: Int
            if let lag = fields["lag"]?.number {
                undelivered = Int(lag)
            } else {
                undelivered = try countAfter(connection, key: key, id: lastDelivered)
            }
            let firstUndelivered =
                undelivered > 0
                ? try firstEntryID(connection, key: key, after: lastDelivered).flatMap(entryMilliseconds) : nil
            let oldestPending = [smallestDelivered, firstUndelivered].compactMap { $0 }.min()
            groups.append(
                Group(
                    name: name, consumers: Int(fields["consumers"]?.number ?? 0), delivered: delivered,
                    undelivered: undelivered, lastDeliveredID: lastDelivered, oldestPendingAt: oldestPending))
        }
        return DeletionDutyReading(entries: length, oldestEntryAt: oldest, groups: groups)
    }

    /// The time part of a stream entry ID (`<ms>-<seq>`).
    public static func entryMilliseconds(_ id: String) -> Int64? {
        guard let dash = id.firstIndex(of: "-") else { return Int64(id) }
        return Int64(id[..<dash])
    }

    // MARK: - Private

    private enum FieldValue {
        case text(String)
        case number(Int64)
        case absent

        var text: String? { if case .text(let value) = self { value } else { nil } }
        var number: Int64? { if case .number(let value) = self { value } else { nil } }
    }

    /// XINFO's flat name/value arrays, whose values are strings, integers or nil.
    private static func mixedFieldMap(_ reply: RedisReply) -> [String: FieldValue] {
        let elements = reply.array ?? []
        var map: [String: FieldValue] = [:]
        for index in stride(from: 0, to: elements.count - 1, by: 2) {
            guard let name = elements[index].string else { continue }
            switch elements[index + 1] {
            case .integer(let value): map[name] = .number(value)
            case .null: map[name] = .absent
            case let value: map[name] = value.string.map(FieldValue.text) ?? .absent
            }
        }
        return map
    }

    /// The ID of the first entry (after `id`, exclusive, when given).
    private static func firstEntryID(_ connection: RedisConnection, key: String, after id: String?) throws(RedisError)
        -> String?
    {
        let start = id.map { "(" + $0 } ?? "-"
        let entries = try connection.command("XRANGE", key, start, "+", "COUNT", "1").array ?? []
        return entries.first?.array?.first?.string
    }

    /// Entries after `id`, counted up to `countLimit`.
    private static func countAfter(_ connection: RedisConnection, key: String, id: String) throws(RedisError) -> Int {
        let entries = try connection.command("XRANGE", key, "(" + id, "+", "COUNT", String(countLimit)).array
        return entries?.count ?? 0
    }
}
