import COpenSSL
import COpenSSLShim

/// An EC P-256 private key that signs ES256 (ECDSA with SHA-256), as a JWS needs it:
/// the raw 64-byte `r || s`, not the DER that OpenSSL produces.
///
/// Apple's Sign in with Apple keys (`.p8` files) are PKCS#8 PEM P-256 keys; the
/// client secret for Apple's token endpoint is a JWT signed with one. Each signature
/// uses its own `EVP_MD_CTX`, so one instance may be shared across threads.
// Unchecked: it holds an OpenSSL `EVP_PKEY` pointer, never mutated after init (see above).
public final class ES256PrivateKey: @unchecked Sendable {
    private let key: OpaquePointer

    /// Reads a PEM private key (a `.p8` file: PKCS#8); it must be EC on P-256.
    public init(pem: String) throws(CryptoError) {
        let parsed = try OpenSSLKey.privateKey(pem: pem)
        guard EVP_PKEY_is_a(parsed, "EC") == 1, Self.groupName(parsed) == "prime256v1" else {
            EVP_PKEY_free(parsed)
            throw CryptoError.fromOpenSSL("the private key is not an EC P-256 key")
        }
        key = parsed
    }

    deinit { EVP_PKEY_free(key) }

    /// ECDSA P-256 with SHA-256 over `message`: 64 bytes, `r` then `s`, each
    /// big-endian and left-padded to 32 bytes (RFC 7518 §3.4).
    public func signES256(_ message: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError.fromOpenSSL("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        // A DER ECDSA-Sig-Value for P-256 is at most 72 bytes.
        var der = [UInt8](repeating: 0, count: 80)
        var length = der.count
        let signed = message.withUnsafeBufferPointer { messageBuffer in
            der.withUnsafeMutableBufferPointer { derBuffer in
                EVP_DigestSignInit_ex(context, nil, "SHA256", nil, nil, key, nil) == 1
                    && EVP_DigestSign(
                        context, derBuffer.baseAddress, &length, messageBuffer.baseAddress, messageBuffer.count) == 1
            }
        }
        guard signed, length > 0, length <= der.count else { throw CryptoError.fromOpenSSL("ES256 signing failed") }
        return try Self.rawSignature(fromDER: Array(der[0..<length]))
    }

    /// The DER `SEQUENCE { INTEGER r, INTEGER s }` as the JWS form `r || s`.
    static func rawSignature(fromDER der: [UInt8]) throws(CryptoError) -> [UInt8] {
        let decoded: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature = decoded else { throw CryptoError.fromOpenSSL("the ECDSA signature is not DER") }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(signature, &r, &s)
        var raw = [UInt8](repeating: 0, count: 64)
        let written = raw.withUnsafeMutableBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress, let r, let s else { return false }
            return BN_bn2binpad(r, base, 32) == 32 && BN_bn2binpad(s, base + 32, 32) == 32
        }
        guard written else { throw CryptoError("the ECDSA signature does not fit P-256") }
        return raw
    }

    private static func groupName(_ key: OpaquePointer) -> String? {
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(key, &name, name.count, &length) == 1, length < name.count else { return nil }
        return String(decoding: name[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
