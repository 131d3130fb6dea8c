import COpenSSL
import COpenSSLShim

#if canImport(Glibc)
    import Glibc
#endif

/// An RSA private key: the test kit's signing key. Production never signs.
// Unchecked: it holds an OpenSSL `EVP_PKEY` pointer, never mutated after init; every
// signature uses its own `EVP_MD_CTX`.
public final class RSAPrivateKey: @unchecked Sendable {
    private let key: OpaquePointer

    private init(owning key: OpaquePointer) { self.key = key }

    deinit { EVP_PKEY_free(key) }

    /// Generates a new key pair with exponent 65537.
    public static func generate(bits: Int = 2048) throws(CryptoError) -> RSAPrivateKey {
        guard let key = siwa_rsa_generate(UInt32(bits)) else { throw CryptoError("RSA key generation failed") }
        return RSAPrivateKey(owning: key)
    }

    /// Reads a PEM private key (PKCS#8 or PKCS#1); it must be RSA.
    public init(pem: String) throws(CryptoError) {
        var text = Array(pem.utf8)
        let parsed = text.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                siwa_private_key_from_pem($0, buffer.count)
            }
        }
        guard let parsed else { throw CryptoError("not a PEM private key") }
        guard siwa_pkey_is_rsa(parsed) == 1 else {
            EVP_PKEY_free(parsed)
            throw CryptoError("the private key is not RSA")
        }
        key = parsed
    }

    /// The key as PKCS#8 PEM text.
    public func pem() throws(CryptoError) -> String {
        var length = 0
        guard let buffer = siwa_private_key_pem(key, &length) else { throw CryptoError("PEM export failed") }
        defer { free(buffer) }
        let bytes = UnsafeRawBufferPointer(start: buffer, count: length)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The modulus length in bits.
    public var modulusBits: Int { Int(EVP_PKEY_get_bits(key)) }

    /// The big-endian modulus bytes (JWK `n`).
    public func modulus() throws(CryptoError) -> [UInt8] { try component(modulus: true) }

    /// The big-endian public exponent bytes (JWK `e`).
    public func exponent() throws(CryptoError) -> [UInt8] { try component(modulus: false) }

    private func component(modulus: Bool) throws(CryptoError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 1024)
        let length = out.withUnsafeMutableBufferPointer {
            siwa_rsa_component(key, modulus ? 1 : 0, $0.baseAddress, $0.count)
        }
        guard length > 0 else { throw CryptoError("RSA component export failed") }
        return Array(out[0..<Int(length)])
    }

    /// The matching public key.
    public func publicKey() throws(CryptoError) -> RSAPublicKey {
        guard let key = RSAPublicKey(modulus: try modulus(), exponent: try exponent()) else {
            throw CryptoError("public key construction failed")
        }
        return key
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 over `message`.
    public func signRS256(_ message: [UInt8]) throws(CryptoError) -> [UInt8] {
        var signature = [UInt8](repeating: 0, count: 1024)
        let length = message.withUnsafeBufferPointer { messageBuffer in
            signature.withUnsafeMutableBufferPointer {
                siwa_rs256_sign(key, messageBuffer.baseAddress, messageBuffer.count, $0.baseAddress, $0.count)
            }
        }
        guard length > 0 else { throw CryptoError("RS256 signing failed") }
        return Array(signature[0..<Int(length)])
    }
}
