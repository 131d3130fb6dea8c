import SIWARedis
import SIWAVerification

/// What the responder needs from the Redis store: apply a notification, answer a ping.
/// `NotificationStore` in service; an in-process stand-in in the responder's status tests.
public protocol NotificationStoring: AnyObject {
    /// Applies one notification and waits for the replicas the store was made with (see
    /// `NotificationStore.applyAcknowledged(_:receivedAt:earlierAttempt:)`).
    func applyAcknowledged(
        _ notification: VerifiedNotification, receivedAt: Int64, earlierAttempt: Int64?
    ) throws(RedisError) -> NotificationStore.Acknowledged

    /// Applies one verified Security Event Token from Google (see
    /// `NotificationStore.apply(_:receivedAt:)` for a `VerifiedSecurityEvent`).
    func apply(_ securityEvent: VerifiedSecurityEvent, receivedAt: Int64) throws(RedisError)
        -> NotificationStore.Outcome

    /// Applies one verified Security Event Token from Google and waits for the replicas the
    /// store was made with (see `NotificationStore.applyAcknowledged(_:receivedAt:)`).
    func applyAcknowledged(_ securityEvent: VerifiedSecurityEvent, receivedAt: Int64) throws(RedisError)
        -> NotificationStore.Acknowledged

    /// Why the store does not answer now (a PING), or nil when it does.
    func probe() -> RedisError?

    /// Whether an `account-deleted` of this user is stored (the user hash holds
    /// `account_deleted_at`).
    func isAccountDeleted(clientID: String, subject: String) throws(RedisError) -> Bool

    /// Records a genuine notification for the client ID (see `NotificationStore`'s `P:clients`).
    func recordClientNotification(clientID: String, at: Int64) throws(RedisError)

    /// Marks the client IDs served and reads `P:clients`.
    func clientActivity(clientIDs: [String], now: Int64) throws(RedisError) -> [String: NotificationStore
        .ClientActivity]
}

extension NotificationStoring {
    /// A stand-in without Google's script cannot apply a Security Event Token.
    public func apply(_ securityEvent: VerifiedSecurityEvent, receivedAt: Int64) throws(RedisError)
        -> NotificationStore.Outcome
    {
        throw RedisError(.unexpectedReply, "this store does not apply Security Event Tokens")
    }

    /// A stand-in's Security Event Token, with no replicas asked for.
    public func applyAcknowledged(_ securityEvent: VerifiedSecurityEvent, receivedAt: Int64) throws(RedisError)
        -> NotificationStore.Acknowledged
    {
        NotificationStore.Acknowledged(try apply(securityEvent, receivedAt: receivedAt))
    }

    /// A store without `P:clients` (the in-process stand-ins) records nothing.
    public func recordClientNotification(clientID: String, at: Int64) throws(RedisError) {}

    /// A store without `P:clients` holds nothing.
    public func clientActivity(clientIDs: [String], now: Int64) throws(RedisError) -> [String: NotificationStore
        .ClientActivity]
    { [:] }

    /// Whether the store answers now.
    public func ping() -> Bool { probe() == nil }
}

extension NotificationStore: NotificationStoring {}

extension NotificationStore.Acknowledged {
    /// An acknowledgement as a store reports it (for stores other than `NotificationStore`).
    public init(_ outcome: NotificationStore.Outcome, replicas: Int? = nil, isShortfall: Bool = false) {
        self.init(outcome: outcome, replicas: replicas, isShortfall: isShortfall)
    }
}
