import SIWARedis
import SIWASupport

/// What `transfer export` and `transfer import` record in the Redis contract (see
/// docs/contract.md, "App transfer records"). Every key starts with the prefix, so with Redis
/// Cluster (prefix `{siwa}`) they share the contract's one slot and each script's keys are
/// local to it.
///
/// - `P:transfer:{<client_id>}`: `transfer_date`, `closes_at` (ms), `target` (the export's
///   recipient team): written once, replaced only by a correction (`corrected_at`).
/// - `P:transfer-pending:{<client_id>}:export|import`: a set of the identifiers given to a run
///   and not yet exchanged (or refused): what `/metrics` counts.
/// - `P:transfer-from:{<client_id>:<sub>}` (sending team): `target`, and `transfer_sub`,
///   `exported_at`, or `error`, `refused_at` (Apple's last answer for that target).
/// - `P:transfer-id:{<client_id>:<transfer_sub>}`: `from_sub`, `exported_at` when the export
///   ran against this Redis; `sub`, `exchanged_at` (or `import_error`, `import_refused_at`)
///   once imported; `deletion_queued_at` when an `account-deleted` found under the new `sub`
///   was put on the deletions stream again.
/// - When the old `sub` is known (one organisation, one Redis), the user hashes link:
///   `transferred_to` and `transferred_at` in the old user's hash, `transferred_from` and
///   `transferred_at` in the new one's.
///
/// Every transfer key expires `recordLifetime` after the transfer date; the user hash fields
/// live as long as their hash. Each user's record is one script: all or nothing.
/// Not thread safe, like the `RedisConnection` it owns.
public final class TransferStore {
    public enum Direction: String, Sendable {
        case export, `import`
    }

    /// What Redis already held under a new `sub` when it was imported.
    public struct Found: Sendable, Equatable {
        public var fields: [String: String]
        /// An `account-deleted` was held: its deletion was put on the deletions stream again.
        public var deletionQueued: Bool
    }

    /// Apple's window for exchanging identifiers, from the transfer date.
    public static let window: Duration = .seconds(60 * 86_400)
    /// How long the transfer keys live after the transfer date: the window and ten months
    /// for app servers to move to the new identifiers.
    public static let recordLifetime: Duration = .seconds(365 * 86_400)
    /// The new user's fields an import reports.
    static let reportedFields = [
        "sessions_revoked_at", "consent_revoked_at", "account_deleted_at", "email_forwarding", "email_forwarding_at",
    ]

    public let connection: RedisConnection
    public let keys: RedisKeyLayout
    public let clientID: String

    public init(connection: RedisConnection, keyPrefix: String, clientID: String) {
        self.connection = connection
        self.keys = RedisKeyLayout(prefix: keyPrefix)
        self.clientID = clientID
    }

    /// What is recorded for the client: the transfer date (ms) and the export's target team,
    /// each nil when none is.
    public func recordedWindow() throws(RedisError) -> (date: Int64?, target: String?) {
        let reply = try connection.command("HMGET", keys.transferWindow(clientID: clientID), "transfer_date", "target")
        let values = reply.array ?? []
        guard values.count == 2 else {
            throw RedisError(.unexpectedReply, "HMGET of the transfer window returned something other than two values")
        }
        return (values[0].string.flatMap { Int64($0) }, values[1].string)
    }

    /// Records the transfer date (ms) and the export's `target` unless they are recorded, or
    /// in their place when `replacing` (a correction, noted as `corrected_at`); returns the
    /// date recorded now, or nil when none is and `date` is nil (the target is then not
    /// recorded either). The window's key lives `recordLifetime` past the date recorded.
    public func recordWindow(date: Int64?, target: String?, replacing: Bool, at time: Int64) throws(RedisError)
        -> Int64?
    {
        let closes = date.map { $0 + Self.window.wholeMilliseconds }
        let expires = date.map { $0 + Self.recordLifetime.wholeMilliseconds }
        let reply = try connection.command([
            "EVAL", Self.windowScript, "1", keys.transferWindow(clientID: clientID), date.map(String.init) ?? "",
            closes.map(String.init) ?? "", expires.map(String.init) ?? "", target ?? "", replacing ? "1" : "",
            String(time),
        ])
        if reply.string == "none" { return nil }
        guard let text = reply.string, let stored = Int64(text) else {
            throw RedisError(.unexpectedReply, "the transfer window script returned something other than a date")
        }
        return stored
    }

    /// When `identifier` is done, its answer: export, the transfer identifier recorded for
    /// `target` (a record of another team's export is not done: asked again); import, the
    /// new `sub`. A refusal is never done: Apple is asked again on every run (a recipient
    /// that asked before the transfer completed is refused, and answered once it has).
    /// When not done, adds it to the pending set and returns nil. `legacyTarget` is the
    /// team taken for a record written before records named their target.
    public func markPending(
        _ identifier: String, direction: Direction, target: String?, legacyTarget: String?, expiresAt: Int64
    ) throws(RedisError) -> String? {
        let record =
            direction == .export
            ? keys.transferFrom(clientID: clientID, subject: identifier)
            : keys.transferID(clientID: clientID, transferSubject: identifier)
        let reply = try connection.command([
            "EVAL", Self.pendingScript, "2", record,
            keys.transferPending(clientID: clientID, direction: direction.rawValue),
            identifier, direction.rawValue, String(expiresAt), target ?? "", legacyTarget ?? "",
        ])
        if let answer = reply.string { return answer }
        guard reply.integer == 0 else {
            throw RedisError(.unexpectedReply, "the transfer pending script returned something other than its answer")
        }
        return nil
    }

    /// The sending team's record of one user: its transfer identifier for `target`, or
    /// Apple's refusal.
    public func recordExport(
        subject: String, target: String, transferSubject: String?, error: String?, at time: Int64, expiresAt: Int64
    ) throws(RedisError) {
        let from = keys.transferFrom(clientID: clientID, subject: subject)
        let id = transferSubject.map { keys.transferID(clientID: clientID, transferSubject: $0) } ?? from
        _ = try connection.command([
            "EVAL", Self.exportScript, "3", from, id, keys.transferPending(clientID: clientID, direction: "export"),
            subject, transferSubject ?? "", error ?? "", String(time), String(expiresAt), target,
        ])
    }

    /// The old `sub` the sending team's export recorded for `transferSubject` in this Redis
    /// (one organisation), if any.
    public func exportedSubject(transferSubject: String) throws(RedisError) -> String? {
        try connection.command(
            "HGET", keys.transferID(clientID: clientID, transferSubject: transferSubject), "from_sub"
        )
        .string
    }

    /// The recipient's record of one transfer identifier: the new `sub` (linked to `fromSubject`
    /// when known), or Apple's refusal. Returns what Redis already held under the new `sub`.
    public func recordImport(
        transferSubject: String, subject: String?, error: String?, fromSubject: String?, at time: Int64,
        expiresAt: Int64
    ) throws(RedisError) -> Found? {
        let newUser = subject.map { keys.user(clientID: clientID, subject: $0) } ?? keys.deletions
        let oldUser = fromSubject.map { keys.user(clientID: clientID, subject: $0) } ?? newUser
        let reply = try connection.command([
            "EVAL", Self.importScript, "5", keys.transferID(clientID: clientID, transferSubject: transferSubject),
            keys.transferPending(clientID: clientID, direction: "import"), newUser, oldUser, keys.deletions,
            transferSubject, subject ?? "", error ?? "", String(time), String(expiresAt), fromSubject ?? "", clientID,
        ])
        guard subject != nil else { return nil }
        guard let values = reply.array, values.count == Self.reportedFields.count + 1 else {
            throw RedisError(.unexpectedReply, "the transfer import script returned something other than its report")
        }
        var fields: [String: String] = [:]
        for (name, value) in zip(Self.reportedFields, values) {
            if let text = value.string { fields[name] = text }
        }
        return Found(fields: fields, deletionQueued: values.last?.integer == 1)
    }

    /// KEYS: 1 window hash. ARGV: 1 transfer date ('' to read only), 2 closes_at, 3 expiry
    /// (ms), 4 target ('' none), 5 '1' to replace what is recorded, 6 time (ms).
    static let windowScript = """
        local date = redis.call('HGET', KEYS[1], 'transfer_date')
        if ARGV[1] ~= '' and (not date or (ARGV[5] == '1' and date ~= ARGV[1])) then
          if date then redis.call('HSET', KEYS[1], 'corrected_at', ARGV[6]) end
          redis.call('HSET', KEYS[1], 'transfer_date', ARGV[1], 'closes_at', ARGV[2])
          redis.call('PEXPIREAT', KEYS[1], ARGV[3])
          date = ARGV[1]
        end
        if not date then return 'none' end
        if ARGV[4] ~= '' then
          local target = redis.call('HGET', KEYS[1], 'target')
          if not target or (ARGV[5] == '1' and target ~= ARGV[4]) then
            if target then redis.call('HSET', KEYS[1], 'corrected_at', ARGV[6]) end
            redis.call('HSET', KEYS[1], 'target', ARGV[4])
          end
        end
        return date
        """

    /// KEYS: 1 the identifier's record, 2 pending set. ARGV: 1 identifier, 2 direction,
    /// 3 expiry (ms), 4 target (export), 5 the target of a record that names none.
    static let pendingScript = """
        local done = false
        if ARGV[2] == 'export' then
          local fields = redis.call('HMGET', KEYS[1], 'transfer_sub', 'target')
          if fields[1] and (fields[2] or ARGV[5]) == ARGV[4] then done = fields[1] end
        else
          done = redis.call('HGET', KEYS[1], 'sub')
        end
        if done then
          redis.call('SREM', KEYS[2], ARGV[1])
          return done
        end
        redis.call('SADD', KEYS[2], ARGV[1])
        redis.call('PEXPIREAT', KEYS[2], ARGV[3])
        return 0
        """

    /// KEYS: 1 transfer-from, 2 transfer-id (1 again for a refusal), 3 pending set.
    /// ARGV: 1 sub, 2 transfer_sub ('' refused), 3 error, 4 time, 5 expiry (ms), 6 target.
    /// A new answer replaces the last one: an exchange ends a refusal, a refusal for another
    /// target drops that target's identifier.
    static let exportScript = """
        if ARGV[2] ~= '' then
          redis.call('HDEL', KEYS[1], 'error', 'refused_at')
          redis.call('HSET', KEYS[1], 'transfer_sub', ARGV[2], 'exported_at', ARGV[4], 'target', ARGV[6])
          redis.call('HSET', KEYS[2], 'from_sub', ARGV[1], 'exported_at', ARGV[4])
          redis.call('PEXPIREAT', KEYS[2], ARGV[5])
        else
          redis.call('HDEL', KEYS[1], 'transfer_sub', 'exported_at')
          redis.call('HSET', KEYS[1], 'error', ARGV[3], 'refused_at', ARGV[4], 'target', ARGV[6])
        end
        redis.call('PEXPIREAT', KEYS[1], ARGV[5])
        redis.call('SREM', KEYS[3], ARGV[1])
        return 1
        """

    /// KEYS: 1 transfer-id, 2 pending set, 3 new user hash, 4 old user hash (3 when unknown),
    /// 5 deletions stream. ARGV: 1 transfer_sub, 2 new sub ('' refused), 3 error, 4 time,
    /// 5 expiry (ms), 6 old sub ('' unknown), 7 client_id.
    ///
    /// Type checks come before any write, so a refusal leaves everything as it was.
    static let importScript = """
        for _, key in ipairs({KEYS[1], KEYS[3], KEYS[4]}) do
          local kind = redis.call('TYPE', key)['ok']
          if ARGV[2] ~= '' and kind ~= 'none' and kind ~= 'hash' then
            -- The key names identifiers: not in the message, which is logged.
            return redis.error_reply('WRONGTYPE a user or transfer-id key does not hold a hash')
          end
        end
        local deletions_type = redis.call('TYPE', KEYS[5])['ok']
        if deletions_type ~= 'none' and deletions_type ~= 'stream' then
          return redis.error_reply('WRONGTYPE the deletions key does not hold a stream')
        end
        if ARGV[2] == '' then
          redis.call('HSET', KEYS[1], 'import_error', ARGV[3], 'import_refused_at', ARGV[4])
          redis.call('PEXPIREAT', KEYS[1], ARGV[5])
          redis.call('SREM', KEYS[2], ARGV[1])
          return {}
        end
        redis.call('HDEL', KEYS[1], 'import_error', 'import_refused_at')
        redis.call('HSET', KEYS[1], 'sub', ARGV[2], 'exchanged_at', ARGV[4])
        redis.call('PEXPIREAT', KEYS[1], ARGV[5])
        redis.call('SREM', KEYS[2], ARGV[1])
        if ARGV[6] ~= '' and ARGV[6] ~= ARGV[2] then
          redis.call('HSET', KEYS[4], 'transferred_to', ARGV[2], 'transferred_at', ARGV[4])
          redis.call('HSET', KEYS[3], 'transferred_from', ARGV[6], 'transferred_at', ARGV[4])
        end
        local found = redis.call('HMGET', KEYS[3], 'sessions_revoked_at', 'consent_revoked_at',
          'account_deleted_at', 'email_forwarding', 'email_forwarding_at')
        local queued = 0
        if found[3] and redis.call('HEXISTS', KEYS[1], 'deletion_queued_at') == 0 then
          -- Deleted before the team could map the new sub: the deletion duty counts it again.
          local fields = {'provider', 'apple', 'client_id', ARGV[7], 'sub', ARGV[2], 'type', 'account-deleted',
            'event_time', found[3], 'applied', '0', 'source', 'transfer', 'transfer_sub', ARGV[1]}
          if ARGV[6] ~= '' then
            table.insert(fields, 'from_sub')
            table.insert(fields, ARGV[6])
          end
          redis.call('XADD', KEYS[5], '*', unpack(fields))
          redis.call('HSET', KEYS[1], 'deletion_queued_at', ARGV[4])
          queued = 1
        end
        table.insert(found, queued)
        return found
        """
}
