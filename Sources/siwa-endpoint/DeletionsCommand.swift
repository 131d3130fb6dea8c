import Foundation
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWAStore

/// `deletions`: the audit view of the deletion duty. Each deletion a consumer group has not
/// acknowledged (who, when, which consumer holds it, how many deliveries), per group the
/// count and the oldest; exit status 1 when one is older than `--older-than`, or when
/// deletions wait and no group reads them.
enum DeletionsCommand {
    static let help = """
        usage: siwa-endpoint deletions [--env-file FILE] [--group G] [--json]
                                       [--older-than DURATION] [--limit N]

        Reads the deletions stream (<prefix>:deletions: one entry per account-deleted
        the endpoint recorded) and shows, per consumer group (or only group G), each
        deletion the group has not acknowledged: client ID, sub, event time, age (since
        the endpoint recorded it), the consumer holding it (- when not delivered yet)
        and its deliveries; then the group's count and its oldest. With no group at all,
        every entry of the stream is listed as waiting. --limit N: at most N deletions
        listed per group (default 1000); the counts and the oldest are exact anyway.
        --json prints one JSON object instead.

        DURATION: a number with s, m, h or d (90m, 36h, 7d).

        Redis is reached with serve's settings (SIWA_REDIS_URL, SIWA_REDIS_TIMEOUT_MS,
        SIWA_KEY_PREFIX, the Sentinel settings; from the environment and --env-file,
        the environment wins).

        Exit status: 0 nothing overdue; 1 a deletion older than --older-than, or
        deletions waiting and no consumer group (or no group G); 2 a usage or settings
        mistake; 3 Redis did not answer.
        """

    /// One deletion not acknowledged by a group.
    struct Pending {
        let id: String
        let fields: [String: String]
        let consumer: String?
        let deliveries: Int
    }

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file", "--group", "--older-than", "--limit"], flagOptions: ["--json"])
        guard arguments.positionals.isEmpty else { throw UsageError("deletions takes no positional arguments") }
        let threshold = try arguments.value("--older-than").map(parseDuration)
        let limit = try arguments.integer("--limit") ?? 1000
        guard (1...100_000).contains(limit) else { throw UsageError("--limit must be between 1 and 100000") }
        let onlyGroup = arguments.value("--group")

        let configuration: ServerConfiguration
        do {
            // The client ID stands in for SIWA_CLIENT_IDS, which this command does not use.
            configuration = try OperatorSettings.load(arguments.value("--env-file"), clientID: "deletions.audit")
        } catch {
            return ServeCommand.refuse(error).exitStatus
        }
        let connection = OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.store.keyPrefix)
        let key = RedisKeyLayout(prefix: configuration.store.keyPrefix).deletions
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var reading: DeletionDutyReading
        var listed: [String: [Pending]] = [:]
        do {
            reading = try DeletionDutyReading.read(connection, key: key)
            if let onlyGroup {
                reading = DeletionDutyReading(
                    entries: reading.entries, oldestEntryAt: reading.oldestEntryAt,
                    groups: reading.groups.filter { $0.name == onlyGroup })
            }
            for group in reading.groups {
                listed[group.name] = try pendingDeletions(connection, key: key, group: group, limit: Int(limit))
            }
            if reading.groups.isEmpty && onlyGroup == nil {
                listed[""] = try entries(connection, key: key, after: nil, limit: Int(limit)).map {
                    Pending(id: $0.id, fields: $0.fields, consumer: nil, deliveries: 0)
                }
            }
        } catch {
            Output.error(
                "siwa-endpoint deletions: Redis did not answer (\(error.code.rawValue)): \(error.operatorMessage)")
            return 3
        }

        let unread = reading.groups.isEmpty && reading.entries > 0
        let missingGroup = onlyGroup != nil && reading.groups.isEmpty
        let overdue =
            threshold.map { threshold in
                let oldest =
                    reading.groups.isEmpty && onlyGroup == nil
                    ? [reading.oldestEntryAt].compactMap { $0 } : reading.groups.compactMap(\.oldestPendingAt)
                return oldest.contains { now - $0 > threshold * 1000 }
            } ?? false
        if arguments.has("--json") {
            printJSON(
                reading, listed: listed, key: key, now: now, noGroup: reading.groups.isEmpty && onlyGroup == nil,
                overdue: overdue)
        } else {
            printText(reading, listed: listed, key: key, now: now, onlyGroup: onlyGroup)
        }
        if missingGroup {
            Output.error("siwa-endpoint deletions: no consumer group \(onlyGroup ?? "") reads \(key)")
            return 1
        }
        if unread {
            Output.error(
                "siwa-endpoint deletions: \(reading.entries) deletions wait in \(key) and no consumer group reads it")
            return 1
        }
        return overdue ? 1 : 0
    }

    /// The group's deletions not acknowledged: delivered ones (XPENDING), then the ones not
    /// delivered yet (after the group's last-delivered ID), at most `limit` in all.
    static func pendingDeletions(
        _ connection: RedisConnection, key: String, group: DeletionDutyReading.Group, limit: Int
    ) throws(RedisError) -> [Pending] {
        var result: [Pending] = []
        let delivered = try StoreReader(connection: connection).pendingDeliveries(
            of: key, group: group.name, limit: limit)
        for item in delivered {
            let fields = try entries(connection, key: key, exactly: item.id).first?.fields ?? [:]
            result.append(Pending(id: item.id, fields: fields, consumer: item.consumer, deliveries: item.deliveries))
        }
        if result.count < limit && group.undelivered > 0 {
            for entry in try entries(connection, key: key, after: group.lastDeliveredID, limit: limit - result.count) {
                result.append(Pending(id: entry.id, fields: entry.fields, consumer: nil, deliveries: 0))
            }
        }
        return result
    }

    static func entries(_ connection: RedisConnection, key: String, after id: String?, limit: Int) throws(RedisError)
        -> [(id: String, fields: [String: String])]
    {
        try StoreReader(connection: connection).entries(
            of: key, from: id.map { "(" + $0 } ?? "-", to: "+", limit: limit)
    }

    static func entries(_ connection: RedisConnection, key: String, exactly id: String) throws(RedisError)
        -> [(id: String, fields: [String: String])]
    {
        try StoreReader(connection: connection).entries(of: key, from: id, to: id)
    }

    static func printText(
        _ reading: DeletionDutyReading, listed: [String: [Pending]], key: String, now: Int64, onlyGroup: String?
    ) {
        Output.line("\(key): \(reading.entries) entries, \(reading.groups.count) consumer group(s)")
        if reading.groups.isEmpty && onlyGroup == nil {
            let oldest = reading.oldestEntryAt.map { ", oldest " + age(now - $0) } ?? ""
            Output.line("no consumer group: \(reading.entries) deletion(s) wait unread\(oldest)")
            for pending in listed[""] ?? [] { Output.line("  " + describe(pending, now: now)) }
        }
        for group in reading.groups {
            let oldest = group.oldestPendingAt.map { ", oldest " + age(now - $0) } ?? ""
            Output.line(
                "group \(group.name): \(group.pending) pending (\(group.delivered) delivered, \(group.undelivered) not yet)\(oldest)"
            )
            for pending in listed[group.name] ?? [] { Output.line("  " + describe(pending, now: now)) }
        }
    }

    static func describe(_ pending: Pending, now: Int64) -> String {
        let recorded = DeletionDutyReading.entryMilliseconds(pending.id) ?? now
        let eventTime = pending.fields["event_time"].flatMap(Int64.init).map(isoDate) ?? "?"
        return
            "client_id=\(pending.fields["client_id"] ?? "?") sub=\(pending.fields["sub"] ?? "?") event_time=\(eventTime) "
            + "age=\(age(now - recorded)) consumer=\(pending.consumer ?? "-") deliveries=\(pending.deliveries) id=\(pending.id)"
    }

    static func printJSON(
        _ reading: DeletionDutyReading, listed: [String: [Pending]], key: String, now: Int64, noGroup: Bool,
        overdue: Bool
    ) {
        func ageSeconds(_ milliseconds: Int64) -> JSONValue { .integer(max(0, now - milliseconds) / 1000) }
        func deletions(_ list: [Pending]) -> JSONValue {
            var items: [JSONValue] = []
            for pending in list {
                var item: [String: JSONValue] = [:]
                item["id"] = .string(pending.id)
                item["client_id"] = .string(pending.fields["client_id"] ?? "")
                item["sub"] = .string(pending.fields["sub"] ?? "")
                item["event_time"] = pending.fields["event_time"].flatMap(Int64.init).map(JSONValue.integer) ?? .null
                item["age_seconds"] = ageSeconds(DeletionDutyReading.entryMilliseconds(pending.id) ?? now)
                item["consumer"] = pending.consumer.map(JSONValue.string) ?? .null
                item["deliveries"] = .integer(Int64(pending.deliveries))
                items.append(.object(item))
            }
            return .array(items)
        }
        var groups: [JSONValue] = []
        for group in reading.groups {
            var item: [String: JSONValue] = [:]
            item["group"] = .string(group.name)
            item["consumers"] = .integer(Int64(group.consumers))
            item["pending"] = .integer(Int64(group.pending))
            item["delivered"] = .integer(Int64(group.delivered))
            item["undelivered"] = .integer(Int64(group.undelivered))
            item["oldest_age_seconds"] = group.oldestPendingAt.map(ageSeconds) ?? .null
            item["deletions"] = deletions(listed[group.name] ?? [])
            groups.append(.object(item))
        }
        var members: [(String, JSONValue)] = [
            ("stream", .string(key)), ("entries", .integer(Int64(reading.entries))),
            ("oldest_entry_age_seconds", reading.oldestEntryAt.map(ageSeconds) ?? .null),
            ("groups", .array(groups)), ("overdue", .bool(overdue)),
        ]
        if noGroup { members.append(("unread", deletions(listed[""] ?? []))) }
        Output.line(JSONWriter.object(members))
    }

    /// `90m`, `36h`, `7d`, `45s`: seconds.
    static func parseDuration(_ text: String) throws(UsageError) -> Int64 {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        guard let unit = text.last.flatMap({ units[$0] }), let number = Int64(text.dropLast()), number >= 0,
            number <= 36_500 * 86_400 / unit
        else { throw UsageError("--older-than must be a number with s, m, h or d (7d, 36h), got \(text)") }
        return number * unit
    }

    static func age(_ milliseconds: Int64) -> String {
        let seconds = max(0, milliseconds) / 1000
        if seconds >= 86_400 { return "\(seconds / 86_400)d\((seconds % 86_400) / 3600)h" }
        if seconds >= 3600 { return "\(seconds / 3600)h\((seconds % 3600) / 60)m" }
        if seconds >= 60 { return "\(seconds / 60)m\(seconds % 60)s" }
        return "\(seconds)s"
    }

    static func isoDate(_ milliseconds: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }
}
