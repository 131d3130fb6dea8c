/// The four notification types Apple defines, and room for a fifth.
///
/// The raw string always travels beside this value (`VerifiedNotification.rawType`),
/// so an unknown type is recorded rather than dropped.
public enum NotificationEventType: Sendable, Equatable, Hashable {
    case emailDisabled
    case emailEnabled
    case consentRevoked
    /// Apple's current page says `account-deleted`; its earlier revision and WWDC20 say
    /// `account-delete`. Both are this one event.
    case accountDeleted
    case unknown

    public init(rawType: String) {
        switch rawType {
        case "email-disabled": self = .emailDisabled
        case "email-enabled": self = .emailEnabled
        case "consent-revoked": self = .consentRevoked
        case "account-deleted", "account-delete": self = .accountDeleted
        default: self = .unknown
        }
    }

    /// The normalised name: Apple's current spelling, or `unknown`.
    public var name: String {
        switch self {
        case .emailDisabled: "email-disabled"
        case .emailEnabled: "email-enabled"
        case .consentRevoked: "consent-revoked"
        case .accountDeleted: "account-deleted"
        case .unknown: "unknown"
        }
    }

    public var isEmailEvent: Bool { self == .emailDisabled || self == .emailEnabled }
}
