import SIWACrypto
import SIWAJSON
import SIWAVerification

/// A test signing key with its `kid`: stands in for Apple's private key, which
/// nobody outside Apple holds. Never used by the production path.
public struct TestSigningKey: Sendable {
    public let keyID: String
    public let privateKey: RSAPrivateKey

    public init(keyID: String, privateKey: RSAPrivateKey) {
        self.keyID = keyID
        self.privateKey = privateKey
    }

    /// A fresh RSA key (2048 bits unless told otherwise).
    public static func generate(keyID: String, bits: Int = 2048) throws(CryptoError) -> TestSigningKey {
        TestSigningKey(keyID: keyID, privateKey: try RSAPrivateKey.generate(bits: bits))
    }

    /// The public half as a JWK object, shaped like the keys Apple publishes.
    public func publicJWK() throws(CryptoError) -> JSONValue {
        .object([
            "kty": .string("RSA"),
            "kid": .string(keyID),
            "use": .string("sig"),
            "alg": .string("RS256"),
            "n": .string(Base64URL.encode(try privateKey.modulus())),
            "e": .string(Base64URL.encode(try privateKey.exponent())),
        ])
    }

    /// A JWKS document holding the given keys, in order.
    public static func jwksDocument(_ keys: [TestSigningKey]) throws(CryptoError) -> String {
        var jwks: [JSONValue] = []
        for key in keys { jwks.append(try key.publicJWK()) }
        return JSONWriter.object([("keys", .array(jwks))])
    }
}
