import SIWAJSON

/// The protected header. `alg` is pinned to RS256 before any key is touched;
/// `jku`, `x5u`, `jwk` and `x5c` are never read, so a token cannot bring its own key.
struct JWSHeader {
    static let maximumKeyIDLength = 256

    let keyID: String
    /// `typ` as sent (nil when absent): Apple's path ignores it; a SET's is checked.
    let type: JSONValue?

    init(decoding bytes: [UInt8]) throws(VerificationError) {
        let members = try JSONDocument.header.parseObject(bytes)
        type = members["typ"]
        switch members["alg"] {
        case nil: throw VerificationError(.algMissing, "the JWS header has no alg")
        case .string("RS256")?: break
        case .string?: throw VerificationError(.algNotAllowed, "the JWS header's alg is not RS256")
        case let other?: throw VerificationError(.algNotAllowed, "the JWS header's alg is a JSON \(other.typeName)")
        }
        guard members["crit"] == nil else {
            throw VerificationError(.critNotSupported, "the JWS header has crit; no extension is understood")
        }
        switch members["kid"] {
        case nil: throw VerificationError(.kidMissing, "the JWS header has no kid")
        case .string(let kid)? where !kid.isEmpty && kid.utf8.count <= Self.maximumKeyIDLength:
            keyID = kid
        default: throw VerificationError(.kidInvalid, "the JWS header's kid is not a string of 1 to 256 bytes")
        }
    }
}
