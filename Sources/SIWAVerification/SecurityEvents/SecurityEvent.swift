/// One event of a verified Security Event Token: its type and what it says about whom.
public struct SecurityEvent: Sendable, Equatable {
    public let type: SecurityEventType
    /// The event-type URI exactly as sent.
    public let rawType: String
    /// The Google account ID (`sub` of an `iss-sub` or `id_token_claims` subject): nil for
    /// `verification`, `token-revoked` and an unknown type without such a subject. Never an
    /// email address: an `id_token_claims` subject's `email` is not read.
    public let subject: String?
    /// `account-disabled`'s `reason` (`hijacking`, `bulk-account`), when sent.
    public let reason: String?
    /// `verification`'s `state`, when sent.
    public let state: String?
    /// `token-revoked`'s token, identified (never the token itself).
    public let revokedToken: RevokedToken?

    public init(
        type: SecurityEventType, rawType: String, subject: String?, reason: String? = nil, state: String? = nil,
        revokedToken: RevokedToken? = nil
    ) {
        self.type = type
        self.rawType = rawType
        self.subject = subject
        self.reason = reason
        self.state = state
        self.revokedToken = revokedToken
    }

    /// Whether applying it ends the user's sessions: `sessions-revoked`, `tokens-revoked`, and
    /// `account-disabled` for `hijacking` (Google's page calls ending sessions on these required).
    public var endsSessions: Bool {
        switch type {
        case .sessionsRevoked, .tokensRevoked: true
        case .accountDisabled: reason.map { $0.utf8.elementsEqual("hijacking".utf8) } ?? false
        default: false
        }
    }
}

/// The `oauth_token` subject of `token-revoked`: which refresh token Google revoked, as an
/// identifier (the first 16 characters with `prefix`, or a hash with
/// `hash_base64_sha512_sha512`), never a token anyone could use.
public struct RevokedToken: Sendable, Equatable {
    /// `token_type`, e.g. `refresh_token`.
    public let tokenType: String
    /// `token_identifier_alg`: `prefix` or `hash_base64_sha512_sha512`.
    public let identifierAlgorithm: String
    /// `token`: the identifier computed with `identifierAlgorithm`.
    public let identifier: String

    public init(tokenType: String, identifierAlgorithm: String, identifier: String) {
        self.tokenType = tokenType
        self.identifierAlgorithm = identifierAlgorithm
        self.identifier = identifier
    }
}
