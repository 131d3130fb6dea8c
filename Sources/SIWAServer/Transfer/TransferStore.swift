import SIWARedis
import SIWASupport

/// What `transfer export` and `transfer import` record in the Redis contract (see
/// docs/contract.md, "App transfer records"). Every key starts with the prefix, so with Redis
/// Cluster (prefix `{siwa}`) they share the contract's one slot and each script's keys are
/// local to it.
///
/// - `P:transfer:{<client_id>}`: `transfer_date`, `closes_at` (ms): written once.
/// - `P:transfer-pending:{<client_id>}:export|import`: a set of the identifiers given to a run
///   and not yet exchanged (or refused): what `/metrics` counts.
/// - `P:transfer-from:{<client_id>:<sub>}` (sending team): `transfer_sub`, `exported_at`, or
///   `error`, `refused_at`.
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
    public static let reportedFields = [
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

    /// Records the transfer date (ms) unless one is recorded; returns the recorded one, or
    /// nil when none is recorded and `date` is nil.
    public func transferDate(recording date: Int64?) throws(RedisError) -> Int64? {
        let closes = date.map { $0 + Self.window.wholeMilliseconds }
        let expires = date.map { $0 + Self.recordLifetime.wholeMilliseconds }
        let reply = try connection.command([
            "EVAL", Self.windowScript, "1", keys.transferWindow(clientID: clientID), date.map(String.init) ?? "",
            closes.map(String.init) ?? "", expires.map(String.init) ?? "",
        ])
        if reply.string == "none" { return nil }
        guard let text = reply.string, let stored = Int64(text) else {
            throw RedisError(.unexpectedReply, "the transfer window script returned something other than a date")
        }
        return stored
    }

    /// Whether `identifier` is already done (recorded, exchanged or refused); when not, adds it
    /// to the pending set.
    public func markPending(_ identifier: String, direction: Direction, expiresAt: Int64) throws(RedisError) -> Bool {
        let record =
            direction == .export
            ? keys.transferFrom(clientID: clientID, subject: identifier)
            : keys.transferID(clientID: clientID, transferSubject: identifier)
        let doneFields = direction == .export ? "transfer_sub error" : "sub import_error"
        let reply = try connection.command([
            "EVAL", Self.pendingScript, "2", record,
            keys.transferPending(clientID: clientID, direction: direction.rawValue),
            identifier, doneFields, String(expiresAt),
        ])
        guard let done = reply.integer else {
            throw RedisError(.unexpectedReply, "the transfer pending script returned something other than a number")
        }
        return done == 1
    }

    /// The sending team's record of one user: its transfer identifier, or Apple's refusal.
    public func recordExport(
        subject: String, transferSubject: String?, error: String?, at time: Int64, expiresAt: Int64
    ) throws(RedisError) {
        let from = keys.transferFrom(clientID: clientID, subject: subject)
        let id = transferSubject.map { keys.transferID(clientID: clientID, transferSubject: $0) } ?? from
        _ = try connection.command([
            "EVAL", Self.exportScript, "3", from, id, keys.transferPending(clientID: clientID, direction: "export"),
            subject, transferSubject ?? "", error ?? "", String(time), String(expiresAt),
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

    /// KEYS: 1 window hash. ARGV: 1 transfer date ('' to read only), 2 closes_at, 3 expiry (ms).
    static let windowScript = """
        local stored = redis.call('HGET', KEYS[1], 'transfer_date')
        if stored then return stored end
        if ARGV[1] == '' then return 'none' end
        redis.call('HSET', KEYS[1], 'transfer_date', ARGV[1], 'closes_at', ARGV[2])
        redis.call('PEXPIREAT', KEYS[1], ARGV[3])
        return ARGV[1]
        """

    /// KEYS: 1 the identifier's record, 2 pending set. ARGV: 1 identifier, 2 the fields that
    /// say it is done (space-separated), 3 expiry (ms).
    static let pendingScript = """
        for field in string.gmatch(ARGV[2], '%S+') do
          if redis.call('HEXISTS', KEYS[1], field) == 1 then
            redis.call('SREM', KEYS[2], ARGV[1])
            return 1
          end
        end
        redis.call('SADD', KEYS[2], ARGV[1])
        redis.call('PEXPIREAT', KEYS[2], ARGV[3])
        return 0
        """

    /// KEYS: 1 transfer-from, 2 transfer-id (1 again for a refusal), 3 pending set.
    /// ARGV: 1 sub, 2 transfer_sub ('' refused), 3 error, 4 time, 5 expiry (ms).
    static let exportScript = """
        if ARGV[2] ~= '' then
          redis.call('HSET', KEYS[1], 'transfer_sub', ARGV[2], 'exported_at', ARGV[4])
          redis.call('HSET', KEYS[2], 'from_sub', ARGV[1], 'exported_at', ARGV[4])
          redis.call('PEXPIREAT', KEYS[2], ARGV[5])
        else
          redis.call('HSET', KEYS[1], 'error', ARGV[3], 'refused_at', ARGV[4])
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
          local fields = {'client_id', ARGV[7], 'sub', ARGV[2], 'type', 'account-deleted',
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
