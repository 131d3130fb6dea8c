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
        // Failures leave entries on this thread's error queue, which libcurl shares.
        defer { ERR_clear_error() }
        guard Self.problem(modulus: modulus, exponent: exponent) == nil,
            let key = Self.publicKey(modulus: modulus, exponent: exponent)
        else { return nil }
        guard let verifier = Self.rs256Verifier(key) else {
            EVP_PKEY_free(key)
            return nil
        }
        self.key = key
        self.verifier = verifier
        self.modulusBits = Int(EVP_PKEY_get_bits(key))
    }

    deinit {
        EVP_MD_CTX_free(verifier)
        EVP_PKEY_free(key)
    }

    /// OpenSSL's parameter names, in static storage: the parameter builder keeps the
    /// pointers until the key is made (a bridged Swift `String` would be gone by then).
    private static let modulusName: StaticString = "n"
    private static let exponentName: StaticString = "e"

    private static func cName(_ name: StaticString) -> UnsafePointer<CChar> {
        UnsafeRawPointer(name.utf8Start).assumingMemoryBound(to: CChar.self)
    }

    /// An RSA public key from big-endian modulus and exponent bytes.
    private static func publicKey(modulus: [UInt8], exponent: [UInt8]) -> OpaquePointer? {
        let n = BN_bin2bn(modulus, Int32(modulus.count), nil)
        let e = BN_bin2bn(exponent, Int32(exponent.count), nil)
        let builder = OSSL_PARAM_BLD_new()
        let context = EVP_PKEY_CTX_new_from_name(nil, "RSA", nil)
        defer {
            EVP_PKEY_CTX_free(context)
            OSSL_PARAM_BLD_free(builder)
            BN_free(n)
            BN_free(e)
        }
        guard let n, let e, let builder, let context,
            OSSL_PARAM_BLD_push_BN(builder, cName(modulusName), n) == 1,
            OSSL_PARAM_BLD_push_BN(builder, cName(exponentName), e) == 1,
            let parameters = OSSL_PARAM_BLD_to_param(builder)
        else { return nil }
        defer { OSSL_PARAM_free(parameters) }
        var key: OpaquePointer?
        guard EVP_PKEY_fromdata_init(context) == 1,
            EVP_PKEY_fromdata(context, &key, siwa_evp_pkey_public_key, parameters) == 1
        else { return nil }
        return key
    }

    /// A verification context for RS256 with `key`, initialised once (the SHA-256 and RSA
    /// implementations fetched, PKCS#1 v1.5 padding set).
    private static func rs256Verifier(_ key: OpaquePointer) -> OpaquePointer? {
        guard let context = EVP_MD_CTX_new() else { return nil }
        var keyContext: OpaquePointer?
        guard EVP_DigestVerifyInit_ex(context, &keyContext, "SHA256", nil, nil, key, nil) == 1,
            EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PADDING) == 1
        else {
            EVP_MD_CTX_free(context)
            return nil
        }
        return context
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 on a copy of the verifier (which is only read, so
    /// threads may share it). The copy skips the algorithm look-ups an initialisation makes.
    private func verify(
        _ message: UnsafeBufferPointer<UInt8>, _ signature: UnsafeBufferPointer<UInt8>
    ) -> Bool {
        // A refused signature leaves entries on this thread's error queue: not an error here.
        defer { ERR_clear_error() }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_MD_CTX_copy_ex(context, verifier) == 1 else { return false }
        return EVP_DigestVerify(context, signature.baseAddress, signature.count, message.baseAddress, message.count)
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

    /// Like `isValidRS256Signature(_:for:)` over bytes held elsewhere (the verifier's fast
    /// path keeps the signature and the signing input inside the buffers it read them from).
    public func isValidRS256Signature(_ signature: UnsafeBufferPointer<UInt8>, for message: UnsafeBufferPointer<UInt8>)
        -> Bool
    {
        verify(message, signature)
    }

    /// Like `isValidRS256Signature(_:for:)` over a slice of bytes, without copying.
    public func isValidRS256Signature(_ signature: [UInt8], for message: ArraySlice<UInt8>) -> Bool {
        message.withUnsafeBufferPointer { messageBuffer in
            signature.withUnsafeBufferPointer { signatureBuffer in verify(messageBuffer, signatureBuffer) }
        }
    }
}
