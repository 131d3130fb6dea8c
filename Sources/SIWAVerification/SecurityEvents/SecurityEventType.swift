/// The event types Google's Cross-Account Protection sends (RISC 1.0 and OAuth Event Types
/// 1.0), and room for one it adds later.
///
/// The raw URI always travels beside this value (`SecurityEvent.rawType`), so an unknown
/// type is recorded rather than dropped.
public enum SecurityEventType: String, Sendable, Equatable, Hashable, CaseIterable {
    case sessionsRevoked = "sessions-revoked"
    case tokensRevoked = "tokens-revoked"
    case tokenRevoked = "token-revoked"
    case accountDisabled = "account-disabled"
    case accountEnabled = "account-enabled"
    case accountCredentialChangeRequired = "account-credential-change-required"
    case verification
    case unknown

    static let riscPrefix = "https://schemas.openid.net/secevent/risc/event-type/"
    static let oauthPrefix = "https://schemas.openid.net/secevent/oauth/event-type/"

    /// The type a full event-type URI names; `unknown` for any other URI. Byte for byte:
    /// a look-alike spelling is a different type.
    public init(rawType: String) {
        self =
            switch rawType {
            case Self.riscPrefix + "sessions-revoked": .sessionsRevoked
            case Self.oauthPrefix + "tokens-revoked": .tokensRevoked
            case Self.oauthPrefix + "token-revoked": .tokenRevoked
            case Self.riscPrefix + "account-disabled": .accountDisabled
            case Self.riscPrefix + "account-enabled": .accountEnabled
            case Self.riscPrefix + "account-credential-change-required": .accountCredentialChangeRequired
            case Self.riscPrefix + "verification": .verification
            default: .unknown
            }
        // String's `==` compares canonical equivalence; a URI is compared as bytes.
        if self != .unknown, !rawType.utf8.elementsEqual(uri.utf8) { self = .unknown }
    }

    /// The short name written to Redis (`type`), `unknown` for a new type.
    public var name: String { rawValue }

    /// The full event-type URI Google sends for this type (empty for `unknown`).
    public var uri: String {
        switch self {
        case .tokensRevoked, .tokenRevoked: Self.oauthPrefix + rawValue
        case .unknown: ""
        default: Self.riscPrefix + rawValue
        }
    }

    /// Whether the event names a Google account (an `iss-sub` or `id_token_claims`
    /// subject): every type but `token-revoked` (a token subject) and `verification` (none).
    public var needsAccountSubject: Bool {
        switch self {
        case .sessionsRevoked, .tokensRevoked, .accountDisabled, .accountEnabled, .accountCredentialChangeRequired:
            true
        case .tokenRevoked, .verification, .unknown: false
        }
    }
}
