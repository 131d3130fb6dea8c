import SIWACrypto
import SIWAJSON
import SIWAVerification

/// A notification to sign, with every field a test or an operator may want to set.
public struct TestNotification: Sendable {
    /// Which wire shape to produce.
    public enum Shape: Sendable {
        /// What Apple really sends: `events` is a JSON string, `event_time` in
        /// milliseconds, `exp = iat + 86400`, header `{"kid","alg"}`.
        case apple
        /// What Apple documents: `events` is an object, `event_time` in seconds, no `exp`.
        case documented
    }

    public var type: String
    public var subject: String
    public var clientID: String
    public var email: String?
    public var isPrivateEmail: Bool?
    /// Unix milliseconds; in the documented shape it is written in seconds.
    public var eventTimeMilliseconds: Int64
    public var tokenID: String
    /// Unix seconds.
    public var issuedAt: Int64
    public var shape: Shape

    public init(
        type: String, subject: String, clientID: String, email: String? = nil, isPrivateEmail: Bool? = nil,
        eventTimeMilliseconds: Int64? = nil, tokenID: String? = nil, issuedAt: Int64, shape: Shape = .apple
    ) {
        self.type = type
        self.subject = subject
        self.clientID = clientID
        self.email = email
        self.isPrivateEmail = isPrivateEmail
        self.eventTimeMilliseconds = eventTimeMilliseconds ?? issuedAt * 1000
        self.tokenID = tokenID ?? TestNotification.randomTokenID()
        self.issuedAt = issuedAt
        self.shape = shape
    }

    /// A 22-character base64url `jti`, the length Apple uses.
    public static func randomTokenID() -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64URL.encode((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// The JWS header exactly as Apple writes it: `{"kid":"…","alg":"RS256"}`, no `typ`.
    public func headerJSON(keyID: String) -> String {
        JSONWriter.object([("kid", .string(keyID)), ("alg", .string("RS256"))])
    }

    /// The `events` object's members, in Apple's order.
    public func eventMembers() -> [(String, JSONValue)] {
        var members: [(String, JSONValue)] = [("type", .string(type)), ("sub", .string(subject))]
        if let email { members.append(("email", .string(email))) }
        if let isPrivateEmail { members.append(("is_private_email", .string(isPrivateEmail ? "true" : "false"))) }
        let eventTime = shape == .apple ? eventTimeMilliseconds : eventTimeMilliseconds / 1000
        members.append(("event_time", .integer(eventTime)))
        return members
    }

    /// The claims JSON in the chosen shape.
    public func claimsJSON() -> String {
        let eventsObject = JSONWriter.object(eventMembers())
        var claims: [(String, JSONValue)] = [
            ("iss", .string(NotificationVerifier.appleIssuer)), ("aud", .string(clientID)),
        ]
        switch shape {
        case .apple:
            claims += [
                ("exp", .integer(issuedAt + 86_400)), ("iat", .integer(issuedAt)), ("jti", .string(tokenID)),
                ("events", .string(eventsObject)),
            ]
            return JSONWriter.object(claims)
        case .documented:
            claims += [("iat", .integer(issuedAt)), ("jti", .string(tokenID))]
            // The documented form nests the events object itself, not a string.
            let prefix = JSONWriter.object(claims).dropLast()
            return prefix + ",\"events\":" + eventsObject + "}"
        }
    }

    /// The signed compact JWS.
    public func token(signedWith key: TestSigningKey) throws(CryptoError) -> String {
        try CompactJWSSigner.signRS256(
            header: headerJSON(keyID: key.keyID), claims: claimsJSON(), key: key.privateKey)
    }

    /// The whole request body, as Apple posts it.
    public func requestBody(signedWith key: TestSigningKey) throws(CryptoError) -> String {
        CompactJWSSigner.requestBody(payload: try token(signedWith: key))
    }
}
