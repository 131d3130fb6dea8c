/// A notification whose signature, issuer, audience and times have been checked.
public struct VerifiedNotification: Sendable, Equatable {
    /// The served client ID found in `aud`: which app this is for.
    public let clientID: String
    /// Apple's stable user identifier, the same value the app got at sign-in.
    public let subject: String
    public let type: NotificationEventType
    /// The `type` string exactly as sent.
    public let rawType: String
    /// `event_time` in Unix milliseconds, whether Apple sent seconds or milliseconds.
    public let eventTimeMilliseconds: Int64
    public let tokenID: String
    /// `iat`, Unix seconds.
    public let issuedAt: Int64
    /// `exp`, Unix seconds, when present.
    public let expiresAt: Int64?
    /// For email events: the relay (or real) address.
    public let email: String?
    /// For email events: whether `email` is a private-relay address, when sent.
    public let isPrivateEmail: Bool?

    public init(
        clientID: String, subject: String, type: NotificationEventType, rawType: String,
        eventTimeMilliseconds: Int64, tokenID: String, issuedAt: Int64, expiresAt: Int64?,
        email: String?, isPrivateEmail: Bool?
    ) {
        self.clientID = clientID
        self.subject = subject
        self.type = type
        self.rawType = rawType
        self.eventTimeMilliseconds = eventTimeMilliseconds
        self.tokenID = tokenID
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.email = email
        self.isPrivateEmail = isPrivateEmail
    }
}
