import SIWACrypto
import SIWAJSON
import SIWAVerification

/// Builds compact JWS strings from exact header and claims text, so tests can
/// sign anything, including the hostile shapes a verifier must refuse.
public enum CompactJWSSigner {
    /// `BASE64URL(header).BASE64URL(claims).BASE64URL(RS256 signature)`.
    public static func signRS256(header: String, claims: String, key: RSAPrivateKey) throws(CryptoError) -> String {
        let signingInput = Base64URL.encode(header.utf8) + "." + Base64URL.encode(claims.utf8)
        let signature = try key.signRS256(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// The request body Apple posts: `{"payload":"<token>"}`.
    public static func requestBody(payload token: String) -> String {
        JSONWriter.object([("payload", .string(token))])
    }
}
