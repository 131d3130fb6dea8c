import SIWAVerification

/// Writes verified notifications into Redis: the state contract app servers read.
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
    public let keyPrefix: String
    public let seenMarkerTTL: Duration
    public let streamMaxLength: Int

    /// The SHA1 Redis gave for the script; nil until loaded (and again after NOSCRIPT).
    private var scriptSHA: String?

    public init(
        connection: RedisConnection, keyPrefix: String = "siwa", seenMarkerTTL: Duration = .seconds(30 * 86_400),
        streamMaxLength: Int = 1_000_000
    ) {
        self.connection = connection
        self.keyPrefix = keyPrefix
        self.seenMarkerTTL = seenMarkerTTL
        self.streamMaxLength = streamMaxLength
    }

    public func userKey(clientID: String, subject: String) -> String {
        "\(keyPrefix):user:{\(clientID):\(subject)}"
    }

    public func seenKey(clientID: String, subject: String, tokenID: String) -> String {
        "\(keyPrefix):seen:{\(clientID):\(subject)}:\(tokenID)"
    }

    public var streamKey: String { "\(keyPrefix):events" }

    public var channel: String { "\(keyPrefix):notifications" }

    /// Applies one notification atomically. `receivedAt` is Unix milliseconds (the
    /// caller's clock, so tests are deterministic); it becomes `updated_at` and the
    /// seen marker's value.
    ///
    /// A connection error on a connection that was up is retried once: the socket may
    /// have been closed by a Redis restart while idle. That is safe because the script
    /// is idempotent per jti: if the first run did commit, the retry answers
    /// `duplicate`, and the notification is stored either way.
    public func apply(_ notification: VerifiedNotification, receivedAt: Int64) throws(RedisError) -> Outcome {
        try checkKeyParts(notification)
        let wasConnected = connection.isConnected
        do {
            return try runScript(notification, receivedAt: receivedAt)
        } catch  where error.isConnectionError && wasConnected {
            return try runScript(notification, receivedAt: receivedAt)
        }
    }

    /// True when Redis answers PING now; never throws.
    public func ping() -> Bool {
        (try? connection.command("PING"))?.string == "PONG"
    }

    // MARK: - Private

    private func checkKeyParts(_ notification: VerifiedNotification) throws(RedisError) {
        // A brace would move the hash tag; a colon in the client ID would let two
        // (client, sub) pairs name the same key. Apple's values never hold them.
        let braces: Set<Character> = ["{", "}"]
        guard !notification.clientID.contains(where: { braces.contains($0) || $0 == ":" }),
            !notification.subject.contains(where: braces.contains)
        else {
            throw RedisError(.unsafeKey, "the client ID or sub holds a character that would break the key layout")
        }
    }

    private func runScript(_ notification: VerifiedNotification, receivedAt: Int64) throws(RedisError) -> Outcome {
        let sha = try loadedScriptSHA()
        let arguments = scriptArguments(notification, receivedAt: receivedAt)
        let reply: RedisReply
        do {
            reply = try connection.command(["EVALSHA", sha, "3"] + arguments)
        } catch  where error.code == .serverError && error.message.hasPrefix("NOSCRIPT") {
            // Redis restarted or SCRIPT FLUSH ran: load it again and retry once.
            scriptSHA = nil
            reply = try connection.command(["EVALSHA", try loadedScriptSHA(), "3"] + arguments)
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

    /// KEYS then ARGV, in the order the script reads them.
    private func scriptArguments(_ notification: VerifiedNotification, receivedAt: Int64) -> [String] {
        let eventTime = String(notification.eventTimeMilliseconds)
        let privateFlag = notification.isPrivateEmail.map { $0 ? "true" : "false" } ?? ""
        let message = JSONWriter.object([
            ("client_id", .string(notification.clientID)), ("sub", .string(notification.subject)),
            ("type", .string(notification.type.name)), ("raw_type", .string(notification.rawType)),
            ("event_time", .integer(notification.eventTimeMilliseconds)), ("jti", .string(notification.tokenID)),
        ])
        // The script appends the applied flag, which only it knows.
        let messageHead = String(message.dropLast()) + ",\"applied\":"
        let ttl = seenMarkerTTL.components
        let ttlMilliseconds = max(1, ttl.seconds * 1000 + ttl.attoseconds / 1_000_000_000_000_000)
        return [
            userKey(clientID: notification.clientID, subject: notification.subject),
            seenKey(clientID: notification.clientID, subject: notification.subject, tokenID: notification.tokenID),
            streamKey,
            channel, notification.clientID, notification.subject, notification.type.name, notification.rawType,
            eventTime, notification.tokenID, notification.email ?? "", privateFlag, String(receivedAt),
            String(ttlMilliseconds), String(max(1, streamMaxLength)), messageHead,
        ]
    }
}
