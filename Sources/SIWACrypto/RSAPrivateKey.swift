import COpenSSL
import COpenSSLShim

/// An RSA private key: the test kit's signing key, and the Google service account key that
/// signs the RISC management API's authorisation JWT (`siwa-endpoint google`). serve never signs.
// Unchecked: it holds an OpenSSL `EVP_PKEY` pointer, never mutated after init; every
// signature uses its own `EVP_MD_CTX`.
public final class RSAPrivateKey: @unchecked Sendable {
    private let key: OpaquePointer

    private init(owning key: OpaquePointer) { self.key = key }

    deinit { EVP_PKEY_free(key) }

    /// Generates a new key pair with exponent 65537.
    public static func generate(bits: Int = 2048) throws(CryptoError) -> RSAPrivateKey {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "RSA", nil) else {
            throw CryptoError.fromOpenSSL("RSA key generation failed")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_rsa_keygen_bits(context, Int32(bits)) == 1,
            EVP_PKEY_generate(context, &key) == 1, let key
        else { throw CryptoError.fromOpenSSL("RSA key generation failed") }
        return RSAPrivateKey(owning: key)
    }

    /// Reads a PEM private key (PKCS#8 or PKCS#1); it must be RSA.
    public init(pem: String) throws(CryptoError) {
        let parsed = try OpenSSLKey.privateKey(pem: pem)
        guard EVP_PKEY_is_a(parsed, "RSA") == 1 else {
            EVP_PKEY_free(parsed)
            throw CryptoError.fromOpenSSL("the private key is not RSA")
        }
        key = parsed
    }

    /// The key as PKCS#8 PEM text.
    public func pem() throws(CryptoError) -> String { try OpenSSLKey.pem(key) }

    /// The modulus length in bits.
    public var modulusBits: Int { Int(EVP_PKEY_get_bits(key)) }

    /// The big-endian modulus bytes (JWK `n`).
    public func modulus() throws(CryptoError) -> [UInt8] { try OpenSSLKey.rsaComponent(key, modulus: true) }

    /// The big-endian public exponent bytes (JWK `e`).
    public func exponent() throws(CryptoError) -> [UInt8] { try OpenSSLKey.rsaComponent(key, modulus: false) }

    /// The matching public key.
    public func publicKey() throws(CryptoError) -> RSAPublicKey {
        guard let key = RSAPublicKey(modulus: try modulus(), exponent: try exponent()) else {
            throw CryptoError("public key construction failed")
        }
        return key
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 over `message`, as `RSAPublicKey` verifies it.
    public func signRS256(_ message: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError.fromOpenSSL("RS256 signing failed") }
        defer { EVP_MD_CTX_free(context) }
        var keyContext: OpaquePointer?
        guard EVP_DigestSignInit_ex(context, &keyContext, "SHA256", nil, nil, key, nil) == 1,
            EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PADDING) == 1
        else { throw CryptoError.fromOpenSSL("RS256 signing failed") }
        var signature = [UInt8](repeating: 0, count: Int(EVP_PKEY_get_size(key)))
        var length = signature.count
        let signed = message.withUnsafeBufferPointer { messageBuffer in
            signature.withUnsafeMutableBufferPointer {
                EVP_DigestSign(context, $0.baseAddress, &length, messageBuffer.baseAddress, messageBuffer.count)
            }
        }
        guard signed == 1, length > 0, length <= signature.count else {
            throw CryptoError.fromOpenSSL("RS256 signing failed")
        }
        return Array(signature[0..<length])
    }
}
