import SIWAJSON
import SIWARedis
import SIWASupport
import SIWAVerification

/// What reconciliation writes into the Redis contract.
///
/// - `P:reconciled:{<client_id>:<sub>}`: the time (ms) of the user's last decided
///   check, expiring 24 hours after it: while it exists the user is not checked again
///   (Apple allows one check a day per user). In the user's hash tag.
/// - A refused refresh token ends the user's sessions: in one script, `sessions_revoked_at`
///   moves to the check time (never backwards), `refresh_token_refused_at` is set to
///   it, `updated_at` too when a field changed; a stream entry and a channel message
///   of type `reconciled-sessions-revoked` with `source` `reconcile` (not Apple-signed)
///   say so. `consent_revoked_at` and `account_deleted_at` are never touched: a refused
///   token does not tell which of them (or a password change) happened.
/// - A token the app revoked at Apple (`revoke`) ends the user's sessions the same way at
///   the revoke time: `sessions_revoked_at` (never backwards), `tokens_revoked_at`, a stream
///   entry and a message of type `app-revoked-tokens` with `source` `revoke`. No check
///   marker is written.
///
/// Not thread safe, like the `RedisConnection` it owns.
public final class ReconcileStore {
    static let eventType = "reconciled-sessions-revoked"
    static let revokedEventType = "app-revoked-tokens"
    public static let checkInterval: Duration = .seconds(86_400)

    public let connection: RedisConnection
    public let keys: RedisKeyLayout
    public let streamMaximumLength: Int

    public init(connection: RedisConnection, keyPrefix: String = "siwa", streamMaximumLength: Int = 1_000_000) {
        self.connection = connection
        self.keys = RedisKeyLayout(prefix: keyPrefix)
        self.streamMaximumLength = streamMaximumLength
    }

    /// True when the user's last decided check is less than 24 hours old.
    public func wasCheckedRecently(clientID: String, subject: String) throws(RedisError) -> Bool {
        try connection.command("EXISTS", keys.reconciled(clientID: clientID, subject: subject)).integer == 1
    }

    /// Records a decided check at `checkedAt` (ms). For a refused token also ends the
    /// user's sessions; returns true when `sessions_revoked_at` moved.
    @discardableResult
    public func record(clientID: String, subject: String, refused: Bool, checkedAt: Int64) throws(RedisError) -> Bool {
        try run(
            clientID: clientID, subject: subject, verdict: refused ? "refused" : "valid", at: checkedAt,
            markerTTL: String(Self.checkInterval.wholeMilliseconds), timeField: "refresh_token_refused_at",
            eventType: Self.eventType, source: "reconcile")
    }

    /// Records that the app revoked the user's token at Apple at `revokedAt` (ms): the
    /// user's sessions end then. Returns true when `sessions_revoked_at` moved.
    @discardableResult
    public func recordRevocation(clientID: String, subject: String, revokedAt: Int64) throws(RedisError) -> Bool {
        try run(
            clientID: clientID, subject: subject, verdict: "refused", at: revokedAt, markerTTL: "",
            timeField: "tokens_revoked_at", eventType: Self.revokedEventType, source: "revoke")
    }

    private func run(
        clientID: String, subject: String, verdict: String, at time: Int64, markerTTL: String, timeField: String,
        eventType: String, source: String
    ) throws(RedisError) -> Bool {
        let message =
            String(
                JSONWriter.object([
                    ("provider", .string("apple")), ("client_id", .string(clientID)), ("sub", .string(subject)),
                    ("type", .string(eventType)), ("event_time", .integer(time)), ("source", .string(source)),
                ]).dropLast()) + ",\"applied\":"
        let reply = try connection.command([
            "EVAL", Self.recordScript, "3", keys.user(clientID: clientID, subject: subject),
            keys.reconciled(clientID: clientID, subject: subject), keys.events, keys.notifications,
            clientID, subject, verdict, String(time), markerTTL, String(max(1, streamMaximumLength)), eventType,
            message, timeField, source,
        ])
        guard let outcome = reply.string, ["unchanged", "applied", "recorded"].contains(outcome) else {
            throw RedisError(.unexpectedReply, "the reconcile script returned something other than an outcome")
        }
        return outcome == "applied"
    }

    /// KEYS: 1 user hash, 2 check marker, 3 events stream. ARGV: 1 channel, 2 client_id,
    /// 3 sub, 4 `valid`/`refused`, 5 check (or revoke) time (ms), 6 marker TTL (ms; '' writes
    /// no marker), 7 stream max length, 8 event type, 9 the published JSON up to the
    /// `applied` value, 10 the user field that records the time (`refresh_token_refused_at`,
    /// `tokens_revoked_at`), 11 the entry's `source`.
    ///
    /// Refusals happen before any write; the marker is written last, so a run that
    /// fails midway checks the user again next time.
    static let recordScript = """
        local user_key, check_key, stream_key = KEYS[1], KEYS[2], KEYS[3]
        local channel, client_id, sub, verdict = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
        local checked_at_text, ttl_ms, stream_maxlen, event_type, message_head = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
        local time_field, source = ARGV[10], ARGV[11]
        local checked_at = tonumber(checked_at_text)
        if checked_at == nil then return redis.error_reply('ERR check time is not a number') end
        local user_type = redis.call('TYPE', user_key)['ok']
        if user_type ~= 'none' and user_type ~= 'hash' then
          return redis.error_reply('WRONGTYPE the user key does not hold a hash')
        end
        local stream_type = redis.call('TYPE', stream_key)['ok']
        if stream_type ~= 'none' and stream_type ~= 'stream' then
          return redis.error_reply('WRONGTYPE the events key does not hold a stream')
        end

        local outcome = 'unchanged'
        if verdict == 'refused' then
          local stored = tonumber(redis.call('HGET', user_key, 'sessions_revoked_at') or '')
          if stored == nil or checked_at > stored then
            outcome = 'applied'
            redis.call('HSET', user_key, 'sessions_revoked_at', checked_at_text,
              time_field, checked_at_text, 'updated_at', checked_at_text)
          else
            -- Already revoked at or after this check: sessions stay as they are.
            outcome = 'recorded'
            redis.call('HSET', user_key, time_field, checked_at_text, 'updated_at', checked_at_text)
          end
          local applied = '0'
          if outcome == 'applied' then applied = '1' end
          redis.call('XADD', stream_key, 'MAXLEN', '~', stream_maxlen, '*', 'provider', 'apple', 'client_id', client_id,
            'sub', sub, 'type', event_type, 'event_time', checked_at_text, 'applied', applied, 'source', source)
          local published = 'false'
          if outcome == 'applied' then published = 'true' end
          redis.call('PUBLISH', channel, message_head .. published .. '}')
        end
        if ttl_ms ~= '' then redis.call('SET', check_key, checked_at_text, 'PX', ttl_ms) end
        return outcome
        """
}
