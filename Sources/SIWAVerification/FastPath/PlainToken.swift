import SIWACrypto

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A compact JWS read on the fast path: its three segments decoded into one buffer, its
/// header read where it lies, the signing input left where it is in the token.
///
/// Built only for a token the strict steps (`CompactJWS`, `JWSHeader`, and for a SET
/// `SecurityEventVerifier.checkType`) would accept with the same kid: anything else (a
/// segment count, an empty segment, bad base64url, a header that is not plain JSON or
/// names another alg, `crit`, a bad kid or typ) is nil, and the strict steps answer it.
struct PlainToken {
    /// The header, the claims and the signature, decoded one after another.
    let decoded: [UInt8]
    let claims: Range<Int>
    let signature: Range<Int>
    /// `BASE64URL(header) "." BASE64URL(claims)`, in the bytes the token was read from.
    let signingInput: Range<Int>
    let keyID: String

    private init(
        decoded: [UInt8], claims: Range<Int>, signature: Range<Int>, signingInput: Range<Int>, keyID: String
    ) {
        self.decoded = decoded
        self.claims = claims
        self.signature = signature
        self.signingInput = signingInput
        self.keyID = keyID
    }

    /// The key named by the kid, and the signature checked where it lies: over the signing
    /// input in `source` (the bytes the token was read from), with the same errors as the
    /// strict steps (the key's own refusal, `signature_length_mismatch`, `signature_invalid`).
    /// Both providers' fast paths take this one step.
    func checkSignature(
        in source: [UInt8], key keyForID: (String) throws(VerificationError) -> RSAPublicKey
    ) throws(VerificationError) {
        let key = try keyForID(keyID)
        guard signature.count == key.modulusBytes else {
            throw VerificationError(
                .signatureLengthMismatch,
                "the signature is \(signature.count) bytes; the key's modulus is \(key.modulusBytes)")
        }
        let authentic = source.withUnsafeBufferPointer { source in
            decoded.withUnsafeBufferPointer { decoded in
                key.isValidRS256Signature(
                    UnsafeBufferPointer(rebasing: decoded[signature]),
                    for: UnsafeBufferPointer(rebasing: source[signingInput]))
            }
        }
        guard authentic else {
            throw VerificationError(.signatureInvalid, "the RS256 signature does not verify with the key named by kid")
        }
    }

    /// The token in `range` of `source`; `checkingSecurityEventType` applies a SET's rule for
    /// `typ` (absent, `secevent+jwt`, `application/secevent+jwt` or `JWT`, any case).
    static func read(
        _ source: UnsafeBufferPointer<UInt8>, token range: Range<Int>, checkingSecurityEventType: Bool
    ) -> PlainToken? {
        guard let base = source.baseAddress, !range.isEmpty else { return nil }
        func dot(from start: Int) -> Int? {
            guard start < range.upperBound,
                let found = memchr(base + start, Int32(UInt8(ascii: ".")), range.upperBound - start)
            else { return nil }
            return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
        }
        guard let firstDot = dot(from: range.lowerBound), let secondDot = dot(from: firstDot + 1),
            dot(from: secondDot + 1) == nil
        else { return nil }
        let headerText = UnsafeBufferPointer(rebasing: source[range.lowerBound..<firstDot])
        let claimsText = UnsafeBufferPointer(rebasing: source[(firstDot + 1)..<secondDot])
        let signatureText = UnsafeBufferPointer(rebasing: source[(secondDot + 1)..<range.upperBound])
        guard !headerText.isEmpty, !claimsText.isEmpty,
            let headerCount = Base64URL.decodedCount(symbols: headerText.count),
            let claimsCount = Base64URL.decodedCount(symbols: claimsText.count),
            let signatureCount = Base64URL.decodedCount(symbols: signatureText.count)
        else { return nil }
        var valid = true
        let decoded = [UInt8](unsafeUninitializedCapacity: headerCount + claimsCount + signatureCount) {
            output, initialized in
            let start = output.baseAddress!
            valid =
                Base64URL.decode(headerText, into: start)
                && Base64URL.decode(claimsText, into: start + headerCount)
                && Base64URL.decode(signatureText, into: start + headerCount + claimsCount)
            initialized = valid ? output.count : 0
        }
        guard valid else { return nil }
        let keyID = decoded.withUnsafeBufferPointer { bytes in
            keyIDOfPlainHeader(bytes, 0..<headerCount, checkingSecurityEventType: checkingSecurityEventType)
        }
        guard let keyID else { return nil }
        return PlainToken(
            decoded: decoded, claims: headerCount..<(headerCount + claimsCount),
            signature: (headerCount + claimsCount)..<decoded.count, signingInput: range.lowerBound..<secondDot,
            keyID: keyID)
    }

    /// The kid of a header `JWSHeader` would accept: `alg` exactly RS256, no `crit`, a kid
    /// of 1 to 256 bytes; and the typ rule when asked.
    private static func keyIDOfPlainHeader(
        _ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, checkingSecurityEventType: Bool
    ) -> String? {
        PlainJSONReader.withObject(bytes, in: range) { members -> String? in
            var algorithm: PlainJSONMember?
            var keyID: PlainJSONMember?
            var type: PlainJSONMember?
            for member in members {
                let name = member.nameStart..<member.nameEnd
                if bytes.bytes(name, equal: "alg") {
                    algorithm = member
                } else if bytes.bytes(name, equal: "kid") {
                    keyID = member
                } else if bytes.bytes(name, equal: "typ") {
                    type = member
                } else if bytes.bytes(name, equal: "crit") {
                    return nil
                }
            }
            guard let algorithm, algorithm.kind == .string,
                bytes.bytes(algorithm.valueStart..<algorithm.valueEnd, equal: "RS256"),
                let keyID, keyID.kind == .string,
                (1...JWSHeader.maximumKeyIDLength).contains(keyID.valueEnd - keyID.valueStart)
            else { return nil }
            if checkingSecurityEventType, let type {
                guard type.kind == .string, isSecurityEventType(bytes, type.valueStart..<type.valueEnd) else {
                    return nil
                }
            }
            return bytes.string(keyID.valueStart..<keyID.valueEnd)
        }
    }

    /// `checkType`'s rule on plain ASCII: compared after ASCII lower-casing, which is what
    /// `lowercased()` does to ASCII.
    private static func isSecurityEventType(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        for accepted: StaticString in ["secevent+jwt", "application/secevent+jwt", "jwt"]
        where accepted.utf8CodeUnitCount == range.count {
            var same = true
            for offset in 0..<range.count {
                var byte = bytes[range.lowerBound + offset]
                if byte >= UInt8(ascii: "A"), byte <= UInt8(ascii: "Z") { byte += 0x20 }
                if byte != accepted.utf8Start[offset] {
                    same = false
                    break
                }
            }
            if same { return true }
        }
        return false
    }
}
