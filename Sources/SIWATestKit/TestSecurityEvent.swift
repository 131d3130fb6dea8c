import SIWACrypto
import SIWAJSON
import SIWAVerification

/// Security Event Tokens shaped like the ones Google's Cross-Account Protection pushes,
/// signed with a test key: the push client of the tests and of `sign --google`.
public enum TestSecurityEvent {
    /// The issuer the tests' configuration documents publish (Google's has the trailing slash).
    public static let issuer = "https://accounts.google.com/"

    /// An `iss-sub` subject for a Google account ID.
    public static func accountSubject(_ sub: String, format member: String = "subject_type") -> JSONValue {
        .object([member: .string("iss-sub"), "iss": .string(issuer), "sub": .string(sub)])
    }

    /// The payload of one event of `type` about `sub` (or of the token identifier, for
    /// `token-revoked`): what Google puts under the type's URI.
    public static func payload(
        _ type: SecurityEventType, sub: String, reason: String? = nil, state: String? = nil
    ) -> JSONValue {
        switch type {
        case .verification:
            return .object(state.map { ["state": .string($0)] } ?? [:])
        case .tokenRevoked:
            return .object([
                "subject": .object([
                    "subject_type": .string("oauth_token"), "token_type": .string("refresh_token"),
                    "token_identifier_alg": .string("prefix"), "token": .string("1/abcdefghijklmn"),
                ])
            ])
        case .accountDisabled:
            var members: [String: JSONValue] = ["subject": accountSubject(sub)]
            if let reason { members["reason"] = .string(reason) }
            return .object(members)
        default:
            return .object(["subject": accountSubject(sub)])
        }
    }

    /// The claims of a SET: `events` maps each URI to its payload.
    public static func claims(
        audience: JSONValue, issuedAt: Int64, tokenID: String, events: [(String, JSONValue)],
        issuer: String = issuer
    ) -> String {
        JSONWriter.object([
            ("iss", .string(issuer)), ("aud", audience), ("iat", .integer(issuedAt)), ("jti", .string(tokenID)),
            ("events", .object(Dictionary(events, uniquingKeysWith: { first, _ in first }))),
        ])
    }

    /// A signed SET with one event of `type` for `clientID` about `sub`, as Google pushes it.
    public static func token(
        _ type: SecurityEventType, clientID: String, sub: String, issuedAt: Int64, tokenID: String,
        key: TestSigningKey, reason: String? = nil, state: String? = nil, issuer: String = issuer
    ) throws(CryptoError) -> String {
        let uri = type == .unknown ? "https://schemas.openid.net/secevent/risc/event-type/new-kind" : type.uri
        return try signed(
            claims: claims(
                audience: .string(clientID), issuedAt: issuedAt, tokenID: tokenID,
                events: [(uri, payload(type, sub: sub, reason: reason, state: state))], issuer: issuer),
            key: key)
    }

    /// Exact claims text signed RS256 under `key`, with the header Google sends.
    public static func signed(claims: String, key: TestSigningKey, typ: String? = "secevent+jwt") throws(CryptoError)
        -> String
    {
        var header: [(String, JSONValue)] = [("alg", .string("RS256")), ("kid", .string(key.keyID))]
        if let typ { header.append(("typ", .string(typ))) }
        return try CompactJWSSigner.signRS256(header: JSONWriter.object(header), claims: claims, key: key.privateKey)
    }

    /// A configuration document as Google publishes at `.well-known/risc-configuration`.
    public static func configurationDocument(issuer: String = issuer, jwksURI: String) -> String {
        JSONWriter.object([
            ("issuer", .string(issuer)), ("jwks_uri", .string(jwksURI)),
            (
                "delivery_methods_supported",
                .array([.string("https://schemas.openid.net/secevent/risc/delivery-method/push")])
            ),
        ])
    }
}
