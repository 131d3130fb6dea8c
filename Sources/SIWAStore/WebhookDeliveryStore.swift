import SIWARedis

/// The Redis side of webhook delivery, for one destination (docs/contract.md, "Webhook
/// delivery"). With prefix `P` and destination `N`:
///
/// - consumer group `deliver:N` on `P:events`, made at `$` the first time (a new destination
///   starts from now, it is not sent history); a restart resumes where the group is. An entry
///   leaves the group's pending list (`XACK`) only after a 2xx, after it was filtered out (a
///   type or client ID the destination does not take), or after it was recorded as failed.
/// - consumer group `deliver:N` on `P:deletions` when N takes `account-deleted`: the copy of
///   an `account-deleted` is acknowledged there when the event got its 2xx (or is not N's).
/// - `P:deliver:N:state`, a hash: `disabled` (`1`), `disabled_reason`, `disabled_at`,
///   `last_success_at`, `last_failure_at`, `last_failure_cause`, `last_failure_status`,
///   `exhausted` (a count). Never a body, a key or an address.
/// - `P:deliver:N:retry`, a hash: stream entry ID -> `<attempts>,<next attempt, ms>` for each
///   event waiting for a retry, so that another deliverer (or a restart) keeps the schedule.
/// - `P:deliver:N:failed`, a stream: one entry per event kept as failed after the last retry
///   (`entry_id`, `jti`, `type`, `client_id`, `sub`, `event_time`, `attempts`, `cause`).
public final class WebhookDeliveryStore {
    public let connection: RedisConnection
    public let keys: RedisKeyLayout
    public let group: String
    let stateKey: String
    let retryKey: String
    let failedKey: String

    public init(connection: RedisConnection, keyPrefix: String, destination: String) {
        self.connection = connection
        keys = RedisKeyLayout(prefix: keyPrefix)
        group = "deliver:" + destination
        stateKey = keyPrefix + ":deliver:" + destination + ":state"
        retryKey = keyPrefix + ":deliver:" + destination + ":retry"
        failedKey = keyPrefix + ":deliver:" + destination + ":failed"
    }

    /// Makes the groups if they are missing (at `$`: from now on), leaves them as they are if not.
    public func ensureGroups(deletions: Bool) throws(RedisError) {
        try ensureGroup(keys.events)
        if deletions { try ensureGroup(keys.deletions) }
    }

    private func ensureGroup(_ stream: String) throws(RedisError) {
        do {
            _ = try connection.command("XGROUP", "CREATE", stream, group, "$", "MKSTREAM")
        } catch  where error.code == .serverError && error.message.hasPrefix("BUSYGROUP") {
            // Made before: resume where it is.
        }
    }

    /// Entries never delivered to this group, at most `count`, now this consumer's.
    public func readNew(consumer: String, count: Int, blockMilliseconds: Int) throws(RedisError)
        -> [(id: String, fields: [String: String])]
    {
        var arguments = ["XREADGROUP", "GROUP", group, consumer, "COUNT", String(count)]
        if blockMilliseconds > 0 { arguments += ["BLOCK", String(blockMilliseconds)] }
        arguments += ["STREAMS", keys.events, ">"]
        return Self.streamEntries(try connection.command(arguments))
    }

    /// The entries this consumer already holds (after a restart with the same consumer name).
    public func readOwnPending(consumer: String, count: Int) throws(RedisError)
        -> [(id: String, fields: [String: String])]
    {
        Self.streamEntries(
            try connection.command(
                "XREADGROUP", "GROUP", group, consumer, "COUNT", String(count), "STREAMS", keys.events, "0"))
    }

    /// Entries another consumer held idle for `idleMilliseconds` (a deliverer that stopped), now ours.
    public func claimIdle(consumer: String, idleMilliseconds: Int, count: Int) throws(RedisError)
        -> [(id: String, fields: [String: String])]
    {
        let reply = try connection.command(
            "XAUTOCLAIM", keys.events, group, consumer, String(idleMilliseconds), "0-0", "COUNT", String(count))
        guard let parts = reply.array, parts.count >= 2 else { return [] }
        return Self.entries(parts[1])
    }

    /// Resets the idle time of entries this consumer holds (waiting for a retry), so that no
    /// other deliverer takes them over while this one is alive.
    public func touch(consumer: String, ids: [String]) throws(RedisError) {
        for start in stride(from: 0, to: ids.count, by: 100) {
            let chunk = Array(ids[start..<min(ids.count, start + 100)])
            _ = try connection.command(["XCLAIM", keys.events, group, consumer, "0"] + chunk + ["JUSTID"])
        }
    }

    /// Acknowledges `id` on the events stream.
    public func acknowledge(_ id: String) throws(RedisError) {
        _ = try connection.command("XACK", keys.events, group, id)
        _ = try connection.command("HDEL", retryKey, id)
    }

    /// Acknowledges, on the deletions stream, the copy of the `account-deleted` with `tokenID`
    /// recorded at `recordedAt` (ms): every new deletion is first read into the group (so the
    /// group's lag is only what nobody read), then the copy found by its jti is acknowledged.
    /// False when no copy was found (nothing is acknowledged then).
    @discardableResult
    public func acknowledgeDeletion(tokenID: String, recordedAt: Int64, consumer: String) throws(RedisError) -> Bool {
        for _ in 0..<100 {
            let read = try connection.command(
                "XREADGROUP", "GROUP", group, consumer, "COUNT", "100", "STREAMS", keys.deletions, ">")
            if Self.streamEntries(read).isEmpty { break }
        }
        let start = String(max(0, recordedAt - 1000))
        let candidates = Self.entries(try connection.command("XRANGE", keys.deletions, start, "+", "COUNT", "200"))
        guard let copy = candidates.first(where: { $0.fields["jti"] == tokenID }) else { return false }
        _ = try connection.command("XACK", keys.deletions, group, copy.id)
        return true
    }

    /// The retry state of `id`: attempts made and the next attempt's time (ms); nil when none.
    public func retryState(_ id: String) throws(RedisError) -> (attempts: Int, nextAttemptAt: Int64)? {
        guard let text = try connection.command("HGET", retryKey, id).string else { return nil }
        let parts = text.split(separator: ",")
        guard parts.count == 2, let attempts = Int(parts[0]), let next = Int64(parts[1]) else { return nil }
        return (attempts, next)
    }

    public func recordRetry(_ id: String, attempts: Int, nextAttemptAt: Int64) throws(RedisError) {
        _ = try connection.command("HSET", retryKey, id, "\(attempts),\(nextAttemptAt)")
    }

    public func recordSuccess(at time: Int64) throws(RedisError) {
        _ = try connection.command("HSET", stateKey, "last_success_at", String(time))
    }

    public func recordFailure(at time: Int64, cause: String, status: Int?) throws(RedisError) {
        _ = try connection.command(
            "HSET", stateKey, "last_failure_at", String(time), "last_failure_cause", cause, "last_failure_status",
            status.map(String.init) ?? "")
    }

    /// Keeps `event` as failed (the failed stream), counts it, then acknowledges it.
    public func recordExhausted(_ event: WebhookEvent, attempts: Int, cause: String) throws(RedisError) {
        _ = try connection.command(
            "XADD", failedKey, "*", "entry_id", event.entryID, "jti", event.tokenID, "provider", event.provider, "type",
            event.type, "client_id", event.clientID, "sub", event.subject, "event_time", String(event.eventTime),
            "attempts", String(attempts),
            "cause", cause)
        _ = try connection.command("HINCRBY", stateKey, "exhausted", "1")
        try acknowledge(event.entryID)
    }

    public func disable(reason: String, at time: Int64) throws(RedisError) {
        _ = try connection.command(
            "HSET", stateKey, "disabled", "1", "disabled_reason", reason, "disabled_at", String(time))
    }

    /// Re-enables a disabled destination; true when it was disabled.
    public func enable() throws(RedisError) -> Bool {
        let removed = try connection.command("HDEL", stateKey, "disabled", "disabled_reason", "disabled_at")
        return (removed.integer ?? 0) > 0
    }

    public func isDisabled() throws(RedisError) -> Bool {
        try connection.command("HGET", stateKey, "disabled").string == "1"
    }

    public func state() throws(RedisError) -> [String: String] {
        try connection.command("HGETALL", stateKey).fieldMap ?? [:]
    }

    /// The address a user's hash holds now, for an email event (nil: none, e.g. deleted since).
    public func email(clientID: String, subject: String) throws(RedisError) -> WebhookEmail? {
        let reply = try connection.command(
            "HMGET", keys.user(clientID: clientID, subject: subject), "email", "is_private_email")
        guard let values = reply.array, values.count == 2, let address = values[0].string, !address.isEmpty else {
            return nil
        }
        let flag = values[1].string
        return WebhookEmail(address: address, isPrivate: flag == "true" ? true : flag == "false" ? false : nil)
    }

    /// Pending for the destination: entries delivered to the group and not acknowledged, plus
    /// those not read yet (the group's lag), and the time (ms) of the oldest of them.
    public func backlog() throws(RedisError) -> (pending: Int, oldestAt: Int64?) {
        let summary = try connection.command("XPENDING", keys.events, group).array ?? []
        let delivered = Int(summary.first?.integer ?? 0)
        var oldest = delivered > 0 ? summary.count > 1 ? summary[1].string.flatMap(Self.milliseconds) : nil : nil
        var lastDelivered = "0-0"
        var lag = 0
        for info in try connection.command("XINFO", "GROUPS", keys.events).array ?? [] {
            guard let fields = info.array else { continue }
            var map: [String: RedisReply] = [:]
            for index in stride(from: 0, to: fields.count - 1, by: 2) {
                if let name = fields[index].string { map[name] = fields[index + 1] }
            }
            guard map["name"]?.string == group else { continue }
            lastDelivered = map["last-delivered-id"]?.string ?? "0-0"
            lag = Int(map["lag"]?.integer ?? 0)
        }
        if lag > 0 {
            let next = Self.entries(
                try connection.command("XRANGE", keys.events, "(" + lastDelivered, "+", "COUNT", "1"))
            if let first = next.first?.id.split(separator: "-").first.flatMap({ Int64($0) }) {
                oldest = min(oldest ?? first, first)
            }
        }
        return (delivered + lag, oldest)
    }

    static func milliseconds(_ id: String) -> Int64? { id.split(separator: "-").first.flatMap { Int64($0) } }

    /// The entries of an XREADGROUP reply (one stream).
    static func streamEntries(_ reply: RedisReply) -> [(id: String, fields: [String: String])] {
        guard let streams = reply.array, let stream = streams.first?.array, stream.count == 2 else { return [] }
        return entries(stream[1])
    }

    /// `[[id, [field, value, ...]], ...]`; an entry whose fields are nil (deleted) is skipped.
    static func entries(_ reply: RedisReply) -> [(id: String, fields: [String: String])] {
        (reply.array ?? []).compactMap { entry in
            guard let parts = entry.array, parts.count == 2, let id = parts[0].string, let fields = parts[1].fieldMap
            else { return nil }
            return (id, fields)
        }
    }
}
