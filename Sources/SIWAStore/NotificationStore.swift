import SIWAJSON
import SIWARedis
import SIWASupport
import SIWAVerification

/// Writes verified notifications into Redis: the state contract app servers read, whose
/// text for them is docs/contract.md (the summary below names the same keys and fields:
/// `ContractCommentTests` checks it against that page).
///
/// Not thread safe, like the `RedisConnection` it owns: one store per worker thread.
///
/// The contract, with prefix `P` (default `siwa`); times are Unix milliseconds as
/// decimal strings; `{<client_id>:<sub>}` is a hash tag, so a user's hash and seen
/// markers share a cluster slot:
///
/// - `P:user:{<client_id>:<sub>}`, a hash: `sessions_revoked_at` (any session of this
///   user in this app that began at or before it is invalid), `consent_revoked_at`,
///   `account_deleted_at`, `email_forwarding` (`enabled`/`disabled`),
///   `email_forwarding_at`, `email`, `is_private_email` (`true`/`false`),
///   `last_event_type`, `last_event_at`, `last_jti`, `updated_at` (our receive time).
/// - `P:seen:{<client_id>:<sub>}:<jti>`: the duplicate marker, value = receive time,
///   expiring after the seen-marker TTL.
/// - `P:events`: a stream, one entry per accepted notification, unknown types too:
///   `client_id`, `sub`, `type` (normalised; `unknown` for a new type), `raw_type`,
///   `event_time`, `jti`, `applied` (`1`/`0`); never an email address (an entry cannot
///   be scrubbed after `account-deleted`). `XADD MAXLEN ~ N`.
/// - `P:deletions`: a stream holding a copy of the `P:events` entry of each accepted
///   `account-deleted` (the deletion duty; a consumer group's lag is its deletions not yet
///   handled). Never trimmed by the endpoint.
/// - Channel `P:notifications`: one JSON message per accepted notification:
///   `{"client_id","sub","type","raw_type","event_time","jti","applied"}` with
///   `event_time` a JSON integer (ms) and `applied` a JSON boolean. Never an email address.
///
/// Rules:
/// - A seen jti changes nothing at all and returns `duplicate`.
/// - Times only move forward, and only a strictly later event moves them (a tie keeps
///   what is stored). `consent-revoked` / `account-deleted` set their own `*_at` and
///   raise `sessions_revoked_at` to the maximum; one no later than its own stored
///   `*_at` is `stale`.
/// - `account-deleted` also sets `email_forwarding` to `disabled`, raises
///   `email_forwarding_at` to the maximum and deletes `email` and `is_private_email`.
/// - An email event no later than `email_forwarding_at` is `stale`. Once
///   `account_deleted_at` is set, every email event is `stale`: no address is ever
///   stored again for that user. An applied email event without `is_private_email`
///   removes the stored flag (it described the previous address).
/// - `last_event_type` / `last_event_at` / `last_jti` follow the latest applied event.
///   `updated_at` changes only when a user field does.
/// - An unknown type changes no user state and returns `recorded`.
/// - `stale` and `recorded` notifications are still marked seen, put on the stream
///   with `applied=0` and published with `"applied":false`.
public final class NotificationStore {
    public let connection: RedisConnection
    public let keys: RedisKeyLayout
    public let seenMarkerTTL: Duration
    public let streamMaximumLength: Int
    /// Replicas that must acknowledge a write (`WAIT`) before it counts as safe
    /// (`SIWA_REDIS_MIN_REPLICAS`); 0: no `WAIT`.
    public let minimumReplicas: Int
    /// How long one `WAIT` waits for them (`SIWA_REDIS_REPLICA_TIMEOUT_MS`).
    public let replicaTimeout: Duration

    /// The defaults of the settings table's store rows (`SIWA_KEY_PREFIX`,
    /// `SIWA_SEEN_TTL_SECONDS`, `SIWA_STREAM_MAXLEN`, `SIWA_REDIS_REPLICA_TIMEOUT_MS`): the
    /// table reads them from here.
    public static let defaultKeyPrefix = "siwa"
    public static let defaultSeenMarkerTTL: Duration = .seconds(30 * 86_400)
    public static let defaultStreamMaximumLength = 1_000_000
    public static let defaultReplicaTimeout: Duration = .milliseconds(100)
    public static let defaultMinimumReplicas = 0

    /// The values `validate()` accepts: the table's bounds of the same rows read them.
    public static let seenMarkerTTLRange: ClosedRange<Duration> = .seconds(60) ... .seconds(31_536_000)
    public static let streamMaximumLengthRange = 1000...1_000_000_000
    public static let minimumReplicasRange = 0...16
    public static let replicaTimeoutRange: ClosedRange<Duration> = .milliseconds(1) ... .milliseconds(60_000)

    /// The SHA1 Redis gave for the script; nil until loaded (and again after NOSCRIPT).
    private var scriptSHA: String?
    /// The arguments every call sends alike, as the bytes Redis receives, made once rather
    /// than for every notification: the stream, deletions and channel keys, the seen
    /// marker's TTL and the stream's bound.
    private let sharedArguments: SharedArguments

    private struct SharedArguments {
        let events: [UInt8]
        let deletions: [UInt8]
        let notifications: [UInt8]
        let ttlMilliseconds: [UInt8]
        let streamMaximumLength: [UInt8]
    }

    public init(
        connection: RedisConnection, keyPrefix: String = defaultKeyPrefix,
        seenMarkerTTL: Duration = defaultSeenMarkerTTL, streamMaximumLength: Int = defaultStreamMaximumLength,
        minimumReplicas: Int = defaultMinimumReplicas, replicaTimeout: Duration = defaultReplicaTimeout
    ) {
        self.connection = connection
        self.keys = RedisKeyLayout(prefix: keyPrefix)
        self.seenMarkerTTL = seenMarkerTTL
        self.streamMaximumLength = streamMaximumLength
        self.minimumReplicas = minimumReplicas
        self.replicaTimeout = replicaTimeout
        sharedArguments = SharedArguments(
            events: Array(keys.events.utf8), deletions: Array(keys.deletions.utf8),
            notifications: Array(keys.notifications.utf8),
            ttlMilliseconds: Array(String(max(1, seenMarkerTTL.wholeMilliseconds)).utf8),
            streamMaximumLength: Array(String(max(1, streamMaximumLength)).utf8))
    }

    /// Refuses settings outside their ranges, before anything is written.
    public func validate() throws(RedisError) {
        guard Self.seenMarkerTTLRange.contains(seenMarkerTTL) else {
            throw RedisError(.invalidSetting, "seenMarkerTTL must be \(Self.seenMarkerTTLRange), got \(seenMarkerTTL)")
        }
        guard Self.streamMaximumLengthRange.contains(streamMaximumLength) else {
            throw RedisError(
                .invalidSetting,
                "streamMaximumLength must be \(Self.streamMaximumLengthRange), got \(streamMaximumLength)")
        }
        guard Self.minimumReplicasRange.contains(minimumReplicas) else {
            throw RedisError(
                .invalidSetting, "minimumReplicas must be \(Self.minimumReplicasRange), got \(minimumReplicas)")
        }
        guard Self.replicaTimeoutRange.contains(replicaTimeout) else {
            throw RedisError(
                .invalidSetting, "replicaTimeout must be \(Self.replicaTimeoutRange), got \(replicaTimeout)")
        }
    }

    /// Applies one notification atomically. `receivedAt` is Unix milliseconds (the
    /// caller's clock, so tests are deterministic); it becomes `updated_at` and the
    /// seen marker's value. `earlierAttempt` is the receive time of an earlier call for this
    /// same delivery whose reply was lost (a spooled record's `attempted_at`): if that call
    /// did write, the outcome is `stored`, not `duplicate`.
    ///
    /// A connection error on a connection that was up is retried once: the socket may
    /// have been closed by a Redis restart while idle. That is safe because the script
    /// is idempotent per jti: if the first run did commit, the retry finds the marker it
    /// wrote and answers `stored`, and the notification is stored either way. A timeout is
    /// not retried: a Redis that hangs would make the caller wait twice (it spools instead).
    public func apply(
        _ notification: VerifiedNotification, receivedAt: Int64, earlierAttempt: Int64? = nil
    ) throws(RedisError) -> Outcome {
        try checkKeyParts(notification)
        let wasConnected = connection.isConnected
        do {
            return try runScript(notification, receivedAt: receivedAt, earlierAttempt: earlierAttempt)
        } catch  where error.isConnectionError && error.code != .timedOut && wasConnected {
            return try runScript(notification, receivedAt: receivedAt, earlierAttempt: receivedAt)
        }
    }

    /// Why Redis does not answer PING now, or nil when it does; never throws.
    public func probe() -> RedisError? {
        do throws(RedisError) {
            return try connection.command("PING").string == "PONG"
                ? nil : RedisError(.unexpectedReply, "PING was not answered PONG")
        } catch {
            return error
        }
    }

    /// Whether the user hash holds `account_deleted_at` (an `account-deleted` of this user
    /// was applied). A client ID or sub outside the key-part rule has no hash: false.
    public func isAccountDeleted(clientID: String, subject: String) throws(RedisError) -> Bool {
        guard UserKeyPart.isValidClientID(clientID), UserKeyPart.isValidSubject(subject) else { return false }
        let reply = try connection.command(
            "HEXISTS", keys.user(clientID: clientID, subject: subject), "account_deleted_at")
        guard let exists = reply.integer else {
            throw RedisError(.unexpectedReply, "HEXISTS did not return an integer")
        }
        return exists == 1
    }

    // MARK: - Private

    private func checkKeyParts(_ notification: VerifiedNotification) throws(RedisError) {
        // The verifier and the settings already hold them to the rule; a spooled record is
        // checked again on replay.
        guard UserKeyPart.isValidClientID(notification.clientID), UserKeyPart.isValidSubject(notification.subject)
        else {
            throw RedisError(.unsafeKey, "the client ID or sub holds a character that would break the key layout")
        }
    }

    private func runScript(
        _ notification: VerifiedNotification, receivedAt: Int64, earlierAttempt: Int64?
    ) throws(RedisError) -> Outcome {
        let sha = try loadedScriptSHA()
        // One array, sized once: the command's three words, then the script's KEYS and ARGV.
        var command: [[UInt8]] = []
        command.reserveCapacity(3 + Self.scriptArgumentCount)
        command.append(Array("EVALSHA".utf8))
        command.append(Array(sha.utf8))
        command.append([UInt8(ascii: "4")])
        appendScriptArguments(notification, receivedAt: receivedAt, earlierAttempt: earlierAttempt, to: &command)
        let reply: RedisReply
        do {
            reply = try connection.command(command)
        } catch  where error.reply == .noScript {
            // Redis restarted, SCRIPT FLUSH ran, or (in a cluster) the node is new to this
            // connection: EVAL sends the script itself and leaves it cached there, once.
            command[0] = Array("EVAL".utf8)
            command[1] = Array(Self.applyScript.utf8)
            reply = try connection.command(command)
        }
        guard let text = reply.string, let outcome = Outcome(rawValue: text) else {
            throw RedisError(.unexpectedReply, "the apply script returned something other than an outcome name")
        }
        return outcome
    }

    private func loadedScriptSHA() throws(RedisError) -> String {
        if let scriptSHA { return scriptSHA }
        let reply = try connection.command("SCRIPT", "LOAD", Self.applyScript)
        guard let sha = reply.string, sha.count == 40 else {
            throw RedisError(.unexpectedReply, "SCRIPT LOAD did not return a SHA1")
        }
        scriptSHA = sha
        return sha
    }

    /// The script's KEYS (4) and ARGV (14).
    private static let scriptArgumentCount = 18

    /// KEYS then ARGV, in the order the script reads them, as the bytes Redis receives
    /// (no intermediate `String` per argument: this runs for every notification).
    private func appendScriptArguments(
        _ notification: VerifiedNotification, receivedAt: Int64, earlierAttempt: Int64?, to command: inout [[UInt8]]
    ) {
        let clientID = Array(notification.clientID.utf8)
        let subject = Array(notification.subject.utf8)
        let tokenID = Array(notification.tokenID.utf8)
        let typeName = Array(notification.type.name.utf8)
        let rawType = Array(notification.rawType.utf8)
        let userKey = keys.userBytes(clientID: clientID, subject: subject)
        let seenKey = keys.seenBytes(clientID: clientID, subject: subject, tokenID: tokenID)

        let privateFlag = notification.isPrivateEmail.map { $0 ? "true" : "false" } ?? ""
        var messageHead: [UInt8] = []
        messageHead.reserveCapacity(256)
        JSONWriter.writeObject(
            [
                ("provider", .string("apple")), ("client_id", .string(notification.clientID)),
                ("sub", .string(notification.subject)), ("type", .string(notification.type.name)),
                ("raw_type", .string(notification.rawType)),
                ("event_time", .integer(notification.eventTimeMilliseconds)), ("jti", .string(notification.tokenID)),
            ], to: &messageHead)
        // The script appends the applied flag, which only it knows.
        messageHead.removeLast()
        messageHead += Array(",\"applied\":".utf8)
        command += [
            userKey, seenKey, sharedArguments.events, sharedArguments.deletions, sharedArguments.notifications,
            clientID, subject, typeName, rawType, Array(String(notification.eventTimeMilliseconds).utf8), tokenID,
            Array((notification.email ?? "").utf8), Array(privateFlag.utf8), Array(String(receivedAt).utf8),
            sharedArguments.ttlMilliseconds, sharedArguments.streamMaximumLength, messageHead,
            earlierAttempt.map { Array(String($0).utf8) } ?? [],
        ]
    }
}
