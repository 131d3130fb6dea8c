import SIWACrypto
import SIWAJSON
import SIWAVerification

/// The client secret Apple's token endpoint requires: a JWT signed ES256 with the
/// team's Sign in with Apple key.
///
/// Header `{"alg":"ES256","kid":KEY_ID}`; claims `iss` (team ID), `iat`, `exp`, `aud`
/// (`https://appleid.apple.com`), `sub` (the client ID). Apple allows `exp` up to six
/// months after `iat`; reconcile signs a fresh secret for each request and lets it
/// live five minutes, so a secret that leaks from a log or a proxy is useless soon
/// after (signing costs well under a millisecond).
public struct AppleClientSecret: Sendable {
    public static let audience = "https://appleid.apple.com"
    public static let lifetimeSeconds: Int64 = 300

    public let teamID: String
    public let keyID: String
    public let key: ES256PrivateKey

    public init(teamID: String, keyID: String, key: ES256PrivateKey) {
        self.teamID = teamID
        self.keyID = keyID
        self.key = key
    }

    /// The compact JWT for `clientID`, issued at `issuedAt` (Unix seconds).
    public func make(clientID: String, issuedAt: Int64) throws(CryptoError) -> String {
        let header = JSONWriter.object([("alg", .string("ES256")), ("kid", .string(keyID))])
        let claims = JSONWriter.object([
            ("iss", .string(teamID)), ("iat", .integer(issuedAt)), ("exp", .integer(issuedAt + Self.lifetimeSeconds)),
            ("aud", .string(Self.audience)), ("sub", .string(clientID)),
        ])
        let signingInput = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try key.signES256(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}
