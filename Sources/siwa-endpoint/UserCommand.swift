import Foundation
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWAStore
import SIWAVerification

#if canImport(Glibc)
    import Glibc
#endif

/// `user CLIENT_ID SUB`: what the endpoint holds in Redis for one user, for an operator.
/// Reads only: the state hash, and that user's entries among the stream's newest ones.
/// Prints no personal data beyond what the hash holds: email addresses (and their
/// private-relay flag) in stream entries are never printed (the hash's own, when it
/// holds them, are).
enum UserCommand {
    static let help = """
        usage: siwa-endpoint user CLIENT_ID SUB|TRANSFER_SUB [--env-file FILE]
                                  [--session-started ISO8601|MS] [--recent N]

        Prints what siwa-endpoint holds in Redis for one user of one app: the state
        hash (times as Unix milliseconds with the UTC date beside them), whether a
        session that started at the given time is still valid (a line `session
        valid` or `session not valid`), and that user's entries among the newest N
        entries of the events stream (default 1000, at most 100000; an entry reconcile
        wrote, not Apple-signed, shows source=reconcile; email addresses in them are
        never printed: only the hash's own, when it holds one).

        After an app transfer (see `siwa-endpoint transfer --help`) either identifier is
        accepted: a transfer identifier `transfer import` exchanged is resolved to the new
        sub (a line `transfer_sub X resolves to sub Y`); an old sub linked to its new one
        (a line `transferred to sub Y`) also shows the new sub's state, where its events
        arrive now, and the session check counts both.

        Redis is reached with serve's settings (SIWA_REDIS_URL, SIWA_REDIS_TIMEOUT_MS,
        SIWA_KEY_PREFIX; from the environment and --env-file, the environment wins).

        Exit status: 0 something is held for this user, 1 nothing is, 2 a usage or
        settings mistake, 3 Redis did not answer.
        """

    static let maximumRecent: Int64 = 100_000

    /// Whether a hash field holds a time in Unix milliseconds: every `…_at` field of the
    /// contract does (`refresh_token_refused_at`, written by reconcile, included).
    static func isTimeField(_ field: String) -> Bool { field.hasSuffix("_at") }

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file", "--session-started", "--recent"])
        guard arguments.positionals.count == 2 else { throw UsageError("user takes CLIENT_ID and SUB\n\n\(help)") }
        let clientID = arguments.positionals[0]
        let identifier = arguments.positionals[1]
        // The same rules the responder applies: both become part of a Redis key's hash tag.
        guard UserKeyPart.isValidClientID(clientID) else {
            throw UsageError("CLIENT_ID must be visible ASCII without { } or :")
        }
        guard UserKeyPart.isValidSubject(identifier) else {
            throw UsageError("SUB must be visible ASCII without { or }")
        }
        let sessionStarted = try arguments.value("--session-started").map(parseSessionStart)
        let recent = try arguments.integer("--recent") ?? 1000
        guard (1...maximumRecent).contains(recent) else {
            throw UsageError("--recent must be between 1 and \(maximumRecent), got \(recent)")
        }

        let configuration: ServerConfiguration
        do {
            configuration = try OperatorSettings.load(arguments.value("--env-file"), clientID: clientID)
        } catch {
            return ServeCommand.refuse(error).exitStatus
        }
        let connection = OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.store.keyPrefix)
        let keys = RedisKeyLayout(prefix: configuration.store.keyPrefix)

        var sub = identifier
        var userKey = keys.user(clientID: clientID, subject: sub)
        var hash: [String: String]
        var linked: (sub: String, key: String, hash: [String: String])?
        let entries: [(id: String, fields: [String: String])]
        let reader = StoreReader(connection: connection)
        do {
            // A transfer identifier `transfer import` exchanged: the new sub's state.
            if let resolved = try reader.field("sub", of: keys.transferID(clientID: clientID, transferSubject: sub)),
                UserKeyPart.isValidSubject(resolved)
            {
                Output.line("transfer_sub \(sub) resolves to sub \(resolved)")
                sub = resolved
                userKey = keys.user(clientID: clientID, subject: sub)
            }
            hash = try reader.hash(userKey)
            // An old sub linked to its new one: the new sub's state too, where its events arrive now.
            if let next = hash["transferred_to"], UserKeyPart.isValidSubject(next), next != sub {
                let key = keys.user(clientID: clientID, subject: next)
                linked = (next, key, try reader.hash(key))
            }
            entries = try recentEntries(
                connection, stream: keys.events, clientID: clientID, sub: sub, count: recent)
        } catch {
            Output.error("siwa-endpoint user: Redis: \(error.operatorMessage)")
            return 3
        }

        Output.line("key \(userKey)")
        printState(hash)
        if let linked {
            Output.line("transferred to sub \(linked.sub): its events arrive under that sub now")
            Output.line("key \(linked.key)")
            printState(linked.hash)
        }
        if let sessionStarted {
            Output.line("session started at \(sessionStarted)  \(utcDate(sessionStarted))")
            // The contract's rule: a session that began at or before sessions_revoked_at is
            // invalid (after a transfer, the later of the old and the new sub's).
            let revokedAt = [hash, linked?.hash ?? [:]].compactMap { $0["sessions_revoked_at"].flatMap { Int64($0) } }
                .max()
            Output.line(revokedAt.map { sessionStarted > $0 } ?? true ? "session valid" : "session not valid")
        }
        Output.line("stream entries for this user among the newest \(recent) of \(keys.events): \(entries.count)")
        for entry in entries {
            Output.line("  " + describe(entry))
        }
        return hash.isEmpty && entries.isEmpty ? 1 : 0
    }

    /// The state hash, one field a line (times with their UTC date).
    static func printState(_ hash: [String: String]) {
        guard !hash.isEmpty else {
            Output.line("state: nothing held")
            return
        }
        Output.line("state:")
        let width = hash.keys.map(\.count).max() ?? 0
        for field in hash.keys.sorted() {
            let value = hash[field] ?? ""
            var line = "  " + field.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + value
            if isTimeField(field), let milliseconds = Int64(value) {
                line += "  " + utcDate(milliseconds)
            }
            Output.line(line)
        }
    }

    /// One stream entry on one line; the email address is never printed.
    static func describe(_ entry: (id: String, fields: [String: String])) -> String {
        let fields = entry.fields
        var parts = [entry.id]
        if let milliseconds = entry.id.split(separator: "-").first.flatMap({ Int64($0) }) {
            parts.append("received \(utcDate(milliseconds))")
        }
        parts.append(fields["type"] ?? "?")
        if let raw = fields["raw_type"], raw != fields["type"] { parts.append("raw_type=\(raw)") }
        if let time = fields["event_time"], let milliseconds = Int64(time) {
            parts.append("event_time=\(time) \(utcDate(milliseconds))")
        }
        parts.append("applied=\(fields["applied"] ?? "?")")
        if let jti = fields["jti"] { parts.append("jti=\(jti)") }
        // An entry written by reconcile (not Apple-signed) says so; Apple's entries carry no source.
        if let source = fields["source"] { parts.append("source=\(source)") }
        // The address and its private-relay flag may be gone from the hash (account-deleted).
        if fields["email"] != nil || fields["is_private_email"] != nil { parts.append("email=(not shown)") }
        return parts.joined(separator: "  ")
    }

    /// This user's entries among the newest `count` of the stream, oldest first.
    static func recentEntries(
        _ connection: RedisConnection, stream: String, clientID: String, sub: String, count: Int64
    ) throws(RedisError) -> [(id: String, fields: [String: String])] {
        let newest = try StoreReader(connection: connection).newestEntries(of: stream, count: count)
        return newest.filter { $0.fields["client_id"] == clientID && $0.fields["sub"] == sub }.reversed()
    }

    /// Unix milliseconds, or an ISO 8601 date and time with a zone (`Z` or `+01:00`),
    /// fractional seconds optional.
    static func parseSessionStart(_ text: String) throws(UsageError) -> Int64 {
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            guard text.count <= 15, let milliseconds = Int64(text) else {
                throw UsageError("--session-started \(text) is out of range")
            }
            // Seconds given by mistake would compare as 1970: refuse them, as the
            // responder reads event times below 10^11 as seconds.
            guard milliseconds >= 100_000_000_000 else {
                throw UsageError("--session-started \(text) looks like seconds; give Unix milliseconds")
            }
            return milliseconds
        }
        for options: ISO8601DateFormatter.Options in [
            [.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime],
        ] {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = options
            if let date = formatter.date(from: text) {
                return Int64((date.timeIntervalSince1970 * 1000).rounded())
            }
        }
        throw UsageError(
            "--session-started must be Unix milliseconds or an ISO 8601 time such as 2026-11-30T08:00:00Z")
    }

    /// `2026-11-30T08:00:00.000Z`.
    static func utcDate(_ milliseconds: Int64) -> String {
        var seconds = time_t(milliseconds.quotientAndRemainder(dividingBy: 1000).quotient)
        var remainder = milliseconds % 1000
        if remainder < 0 {
            seconds -= 1
            remainder += 1000
        }
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return "?" }
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millisecondsText = String(remainder + 1000).dropFirst()
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):"
            + "\(two(parts.tm_min)):\(two(parts.tm_sec)).\(millisecondsText)Z"
    }
}
