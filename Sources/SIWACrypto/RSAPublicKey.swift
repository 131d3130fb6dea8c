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

    /// The largest modulus a key may have. Apple's keys have 2048 bits; OpenSSL verifies
    /// nothing over 16,384, so a larger one could be loaded but never verify.
    public static let maximumModulusBits = 8192

    /// Why `modulus` and `exponent` (big-endian, without leading zero octets) cannot be an
    /// RSA public key to verify with, or nil when they can: `n` odd and at most
    /// `maximumModulusBits` long, `e` odd with 3 <= e < n. An `e` of 1 would make every
    /// "signature" the message itself (anyone could forge one from the public key alone);
    /// an even `n` or `e` is no RSA key.
    public static func problem(modulus: [UInt8], exponent: [UInt8]) -> String? {
        guard let lastModulusByte = modulus.last, modulus.first != 0 else { return "n is empty or has leading zeros" }
        guard let lastExponentByte = exponent.last, exponent.first != 0 else {
            return "e is empty or has leading zeros"
        }
        let modulusBits = modulus.count * 8 - modulus[0].leadingZeroBitCount
        guard modulusBits <= maximumModulusBits else {
            return "n has \(modulusBits) bits, over \(maximumModulusBits)"
        }
        guard lastModulusByte & 1 == 1 else { return "n is even" }
        guard lastExponentByte & 1 == 1 else { return "e is even" }
        guard exponent.count > 1 || exponent[0] >= 3 else { return "e is below 3" }
        let exponentBelowModulus =
            exponent.count < modulus.count
            || (exponent.count == modulus.count && exponent.lexicographicallyPrecedes(modulus))
        guard exponentBelowModulus else { return "e is not below n" }
        return nil
    }

    /// Builds a key from big-endian modulus and exponent bytes, as found in a JWK.
    /// Returns nil when they are no RSA public key (`problem(modulus:exponent:)`), or when
    /// OpenSSL refuses the numbers or cannot set up RS256 with them.
    public init?(modulus: [UInt8], exponent: [UInt8]) {
        guard Self.problem(modulus: modulus, exponent: exponent) == nil,
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
