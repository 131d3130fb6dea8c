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
    /// The notification's `jti`.
    public let tokenID: String

    /// The five types a destination may ask for (`unknown`: a type Apple added, kept as it came).
    public static let types = ["email-disabled", "email-enabled", "consent-revoked", "account-deleted", "unknown"]

    public init(
        entryID: String, clientID: String, subject: String, type: String, rawType: String, eventTime: Int64,
        tokenID: String
    ) {
        self.entryID = entryID
        self.clientID = clientID
        self.subject = subject
        self.type = type
        self.rawType = rawType
        self.eventTime = eventTime
        self.tokenID = tokenID
    }

    /// An entry of the events stream; nil when a field is missing or malformed.
    public init?(entryID: String, fields: [String: String]) {
        guard let clientID = fields["client_id"], let subject = fields["sub"], let type = fields["type"],
            let eventTime = fields["event_time"].flatMap(Int64.init), let tokenID = fields["jti"], !tokenID.isEmpty
        else { return nil }
        self.init(
            entryID: entryID, clientID: clientID, subject: subject, type: Self.types.contains(type) ? type : "unknown",
            rawType: fields["raw_type"] ?? type, eventTime: eventTime, tokenID: tokenID)
    }

    /// The stream entry's time (Unix milliseconds), from its ID.
    public var recordedAt: Int64? { entryID.split(separator: "-").first.flatMap { Int64($0) } }

    /// Whether the email address goes with this event (the two email events only).
    public var isEmailEvent: Bool { type == "email-disabled" || type == "email-enabled" }
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
