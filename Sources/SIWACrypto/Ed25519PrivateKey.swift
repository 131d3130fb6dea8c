import COpenSSL

/// An ed25519 private key (RFC 8032), made from its 32-byte seed: signs messages whole
/// (ed25519 hashes internally, so `EVP_DigestSign` is given no digest).
///
/// Standard Webhooks' asymmetric scheme (`v1a`) signs with it; the seed is what a
/// `whsk_` key file holds and the public key is what a `whpk_` string holds. Each
/// signature uses its own `EVP_MD_CTX`, so one instance may be shared across threads.
// Unchecked: it holds an OpenSSL `EVP_PKEY` pointer, never mutated after init (see above).
public final class Ed25519PrivateKey: @unchecked Sendable {
    public static let seedLength = 32
    public static let publicKeyLength = 32
    public static let signatureLength = 64

    private let key: OpaquePointer

    /// The key of a 32-byte seed; any other length is refused.
    public init(seed: [UInt8]) throws(CryptoError) {
        guard seed.count == Self.seedLength else {
            throw CryptoError("an ed25519 seed is \(Self.seedLength) bytes, not \(seed.count)")
        }
        let made = seed.withUnsafeBufferPointer {
            EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, $0.baseAddress, $0.count)
        }
        guard let made else { throw CryptoError.fromOpenSSL("the ed25519 key could not be made") }
        key = made
    }

    /// A fresh key from OpenSSL's random generator: its seed, to be written to a key file.
    public static func generateSeed() throws(CryptoError) -> [UInt8] {
        try RandomBytes.generate(seedLength)
    }

    deinit { EVP_PKEY_free(key) }

    /// The 32-byte public key.
    public func publicKey() throws(CryptoError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.publicKeyLength)
        var length = out.count
        let ok = out.withUnsafeMutableBufferPointer { EVP_PKEY_get_raw_public_key(key, $0.baseAddress, &length) == 1 }
        guard ok, length == Self.publicKeyLength else { throw CryptoError.fromOpenSSL("no ed25519 public key") }
        return out
    }

    /// The 64-byte ed25519 signature of `message`.
    public func sign(_ message: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError.fromOpenSSL("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        var signature = [UInt8](repeating: 0, count: Self.signatureLength)
        var length = signature.count
        let signed = message.withUnsafeBufferPointer { messageBuffer in
            signature.withUnsafeMutableBufferPointer { signatureBuffer in
                EVP_DigestSignInit(context, nil, nil, nil, key) == 1
                    && EVP_DigestSign(
                        context, signatureBuffer.baseAddress, &length, messageBuffer.baseAddress, messageBuffer.count)
                        == 1
            }
        }
        guard signed, length == Self.signatureLength else { throw CryptoError.fromOpenSSL("ed25519 signing failed") }
        return signature
    }
}

/// Bytes from OpenSSL's cryptographically secure generator.
public enum RandomBytes {
    public static func generate(_ count: Int) throws(CryptoError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) == 1 }
        guard ok else { throw CryptoError.fromOpenSSL("RAND_bytes failed") }
        return bytes
    }
}
