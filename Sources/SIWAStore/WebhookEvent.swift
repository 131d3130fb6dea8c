import Foundation

/// One event as the events stream holds it (never an email address: see docs/contract.md).
public struct WebhookEvent: Sendable, Equatable {
    /// The stream entry's ID (`<ms>-<seq>`): when the endpoint recorded it.
    public let entryID: String
    public let clientID: String
    public let subject: String
    /// The normalised type: one of `WebhookEvent.types`.
    public let type: String
    public let rawType: String
    /// Apple's `event_time`, Unix milliseconds.
    public let eventTime: Int64
    /// The notification's (or Google's SET's) `jti`.
    public let tokenID: String
    /// `apple` or `google`: whose event this is (an entry without `provider` is Apple's).
    public let provider: String
    /// Google's fields as the stream holds them, each only when Google sent it: `reason`
    /// (`account-disabled`), `state` (`verification`), and the revoked token's identifier
    /// (`token_type`, `token_identifier_alg`, `token`: a prefix or a hash, never the token).
    public let googleFields: [(String, String)]

    /// Apple's five types a destination may ask for (`unknown`: a type Apple added, kept as it
    /// came). A destination without `types` asks for these: Google's events go only to one
    /// that names them.
    public static let types = ["email-disabled", "email-enabled", "consent-revoked", "account-deleted", "unknown"]

    /// Google's types as a destination names them (`google:` and the stream's `type`).
    public static let googleTypes = [
        "sessions-revoked", "tokens-revoked", "token-revoked", "account-disabled", "account-enabled",
        "account-credential-change-required", "verification", "unknown",
    ].map { googleTypePrefix + $0 }

    static let googleTypePrefix = "google:"

    /// The stream's Google fields a webhook carries, in this order (never an email address).
    static let googleFieldNames = ["reason", "state", "token_type", "token_identifier_alg", "token"]

    public init(
        entryID: String, clientID: String, subject: String, type: String, rawType: String, eventTime: Int64,
        tokenID: String, provider: String = "apple", googleFields: [(String, String)] = []
    ) {
        self.entryID = entryID
        self.clientID = clientID
        self.subject = subject
        self.type = type
        self.rawType = rawType
        self.eventTime = eventTime
        self.tokenID = tokenID
        self.provider = provider
        self.googleFields = googleFields
    }

    /// An entry of the events stream; nil when a field is missing or malformed, or the
    /// provider is neither Apple nor Google (a later release's: not this deliverer's to send).
    public init?(entryID: String, fields: [String: String]) {
        guard let clientID = fields["client_id"], let subject = fields["sub"], let type = fields["type"],
            let eventTime = fields["event_time"].flatMap(Int64.init), let tokenID = fields["jti"], !tokenID.isEmpty
        else { return nil }
        switch fields["provider"] ?? "apple" {
        case "apple":
            self.init(
                entryID: entryID, clientID: clientID, subject: subject,
                type: Self.types.contains(type) ? type : "unknown", rawType: fields["raw_type"] ?? type,
                eventTime: eventTime, tokenID: tokenID)
        case "google":
            let known = Self.googleTypes.contains(Self.googleTypePrefix + type)
            self.init(
                entryID: entryID, clientID: clientID, subject: subject, type: known ? type : "unknown",
                rawType: fields["raw_type"] ?? type, eventTime: eventTime, tokenID: tokenID, provider: "google",
                googleFields: Self.googleFieldNames.compactMap { name in fields[name].map { (name, $0) } })
        default:
            return nil
        }
    }

    public static func == (left: WebhookEvent, right: WebhookEvent) -> Bool {
        left.entryID == right.entryID && left.clientID == right.clientID && left.subject == right.subject
            && left.type == right.type && left.rawType == right.rawType && left.eventTime == right.eventTime
            && left.tokenID == right.tokenID && left.provider == right.provider
            && left.googleFields.elementsEqual(right.googleFields, by: { $0 == $1 })
    }

    /// The name a destination's `types` uses for this event: Apple's type as it is, Google's
    /// behind `google:`.
    public var destinationType: String { provider == "google" ? Self.googleTypePrefix + type : type }

    /// The stream entry's time (Unix milliseconds), from its ID.
    public var recordedAt: Int64? { entryID.split(separator: "-").first.flatMap { Int64($0) } }

    /// Whether the email address goes with this event (the two email events only).
    public var isEmailEvent: Bool { provider == "apple" && (type == "email-disabled" || type == "email-enabled") }
}

/// The address a user's hash holds at delivery time, for the two email events.
public struct WebhookEmail: Sendable, Equatable {
    public let address: String
    public let isPrivate: Bool?

    public init(address: String, isPrivate: Bool?) {
        self.address = address
        self.isPrivate = isPrivate
    }
}
