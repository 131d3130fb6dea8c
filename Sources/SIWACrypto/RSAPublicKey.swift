import COpenSSL
import COpenSSLShim

/// An RSA public key held by OpenSSL, used for RS256 signature checks.
///
/// The key is immutable after construction and every check uses its own
/// `EVP_MD_CTX` (a copy of one initialised with the key at construction, so a check does
/// not look the algorithms up again), so one instance may be shared across threads.
// Unchecked: it holds OpenSSL's `EVP_PKEY` and `EVP_MD_CTX` pointers, never mutated after
// init (checks only copy the context; see above).
public final class RSAPublicKey: @unchecked Sendable {
    let key: OpaquePointer
    /// RS256 verification with this key, initialised once.
    private let verifier: OpaquePointer

    /// The modulus length in bits.
    public let modulusBits: Int

    /// Builds a key from big-endian modulus and exponent bytes, as found in a JWK.
    /// Returns nil when OpenSSL refuses the numbers, or cannot set up RS256 with them.
    public init?(modulus: [UInt8], exponent: [UInt8]) {
        guard !modulus.isEmpty, !exponent.isEmpty,
            let key = siwa_rsa_public_key_from_components(modulus, modulus.count, exponent, exponent.count)
        else { return nil }
        guard let verifier = siwa_rs256_verifier_new(key) else {
            EVP_PKEY_free(key)
            return nil
        }
        self.key = key
        self.verifier = verifier
        self.modulusBits = Int(EVP_PKEY_get_bits(key))
    }

    deinit {
        siwa_rs256_verifier_free(verifier)
        EVP_PKEY_free(key)
    }

    private func verify(
        _ message: UnsafeBufferPointer<UInt8>, _ signature: UnsafeBufferPointer<UInt8>
    ) -> Bool {
        siwa_rs256_verify_with(verifier, message.baseAddress, message.count, signature.baseAddress, signature.count)
            == 1
    }

    /// The modulus length in bytes: the exact length of every valid signature.
    public var modulusBytes: Int { (modulusBits + 7) / 8 }

    /// RSASSA-PKCS1-v1_5 with SHA-256 over `message`.
    public func isValidRS256Signature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        message.withUnsafeBufferPointer { messageBuffer in
            signature.withUnsafeBufferPointer { signatureBuffer in verify(messageBuffer, signatureBuffer) }
        }
    }

    /// Like `isValidRS256Signature(_:for:)` over a slice of bytes, without copying.
    public func isValidRS256Signature(_ signature: [UInt8], for message: ArraySlice<UInt8>) -> Bool {
        message.withUnsafeBufferPointer { messageBuffer in
            signature.withUnsafeBufferPointer { signatureBuffer in verify(messageBuffer, signatureBuffer) }
        }
    }
}
