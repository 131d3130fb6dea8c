import SIWACrypto
import SIWAJSON
import SIWAVerification

/// The authorisation the RISC management API asks for: a JWT signed RS256 with the service
/// account's key, sent as `Authorization: Bearer` (Google, "Protect user accounts with
/// Cross-Account Protection": header `kid` = the key's `private_key_id`; claims `iss` = `sub` =
/// the service account's email, `aud` = the RiscManagementService URL, `iat`, `exp` = `iat` +
/// 3600). A fresh token is signed for each request, so a retried request is never refused for
/// an old `iat`.
public struct GoogleManagementAuthorization: Sendable {
    public static let audience = "https://risc.googleapis.com/google.identity.risc.v1beta.RiscManagementService"
    public static let lifetimeSeconds: Int64 = 3600

    public let key: GoogleServiceAccountKey

    public init(key: GoogleServiceAccountKey) { self.key = key }

    /// The compact JWT issued at `issuedAt` (Unix seconds).
    public func token(issuedAt: Int64) throws(CryptoError) -> String {
        let header = JSONWriter.object([
            ("alg", .string("RS256")), ("typ", .string("JWT")), ("kid", .string(key.privateKeyID)),
        ])
        let claims = JSONWriter.object([
            ("iss", .string(key.clientEmail)), ("sub", .string(key.clientEmail)), ("aud", .string(Self.audience)),
            ("iat", .integer(issuedAt)), ("exp", .integer(issuedAt + Self.lifetimeSeconds)),
        ])
        let signingInput = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try key.privateKey.signRS256(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}
