/// A Security Event Token whose signature, issuer, audience, time and events have been checked.
public struct VerifiedSecurityEvent: Sendable, Equatable {
    /// The configured client IDs `aud` names, in `aud`'s order, each once: the event is
    /// applied for each of them.
    public let clientIDs: [String]
    /// `jti`: the de-duplication key (unique per SET).
    public let tokenID: String
    /// `iat`, Unix seconds: the event time (Google sends no other).
    public let issuedAt: Int64
    /// The events, sorted by their type URI (a JSON object has no order; RFC 8417 allows
    /// several events in one token, Google sends one). Each is applied.
    public let events: [SecurityEvent]

    public init(clientIDs: [String], tokenID: String, issuedAt: Int64, events: [SecurityEvent]) {
        self.clientIDs = clientIDs
        self.tokenID = tokenID
        self.issuedAt = issuedAt
        self.events = events
    }

    /// The event time in Unix milliseconds, as the contract stores times.
    public var eventTimeMilliseconds: Int64 {
        let (product, overflow) = issuedAt.multipliedReportingOverflow(by: 1000)
        return overflow ? .max : product
    }
}
