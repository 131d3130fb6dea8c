import SIWACrypto
import SIWAJSON

/// Apple's signing keys, looked up by `kid` and never by position.
///
/// Every JWK is checked once when the set is built: an unusable key keeps the
/// reason, so a token that names it fails with that reason, not a vague one.
public struct JSONWebKeySet: Sendable {
    public static let minimumModulusBits = 2048

    enum Entry: Sendable {
        case usable(RSAPublicKey)
        case unusable(VerificationError)
    }

    private let entries: [String: Entry]

    /// The `kid` values of the keys that can verify, sorted.
    public let usableKeyIDs: [String]

    /// Every `kid` in the set, sorted.
    public var keyIDs: [String] { entries.keys.sorted() }

    public var isEmpty: Bool { entries.isEmpty }

    /// An empty set: every verification answers `keys_unavailable`.
    public init() {
        entries = [:]
        usableKeyIDs = []
    }

    /// Parses a JWKS document (`{"keys": [...]}`).
    public init(jsonBytes: some Collection<UInt8>) throws(JWKSError) {
        let document: JSONValue
        do { document = try StrictJSONParser.parse(jsonBytes) } catch { throw JWKSError("the JWKS is not valid JSON") }
        guard case .object(let members) = document, case .array(let keys)? = members["keys"] else {
            throw JWKSError("the JWKS has no \"keys\" array")
        }
        var entries: [String: Entry] = [:]
        var duplicated: Set<String> = []
        for key in keys {
            guard case .object(let jwk) = key, case .string(let kid)? = jwk["kid"], !kid.isEmpty else { continue }
            if entries[kid] != nil { duplicated.insert(kid) }
            entries[kid] = Self.entry(for: jwk)
        }
        for kid in duplicated {
            // Two keys under one kid: refuse both rather than guess.
            entries[kid] = .unusable(VerificationError(.keyInvalid, "the JWKS holds more than one key with this kid"))
        }
        self.entries = entries
        self.usableKeyIDs = entries.compactMap { if case .usable = $0.value { $0.key } else { nil } }.sorted()
    }

    /// The key for `kid`, with no fallback to any other key.
    public func key(forKeyID kid: String) throws(VerificationError) -> RSAPublicKey {
        guard !entries.isEmpty else { throw VerificationError(.keysUnavailable, "no signing keys are loaded") }
        switch entries[kid] {
        case .usable(let key)?: return key
        case .unusable(let error)?: throw error
        case nil: throw VerificationError(.kidUnknown, "no key in the JWKS has the token's kid")
        }
    }

    private static func entry(for jwk: [String: JSONValue]) -> Entry {
        guard case .string("RSA")? = jwk["kty"] else {
            return .unusable(VerificationError(.keyNotRSA, "the key named by kid is not an RSA key"))
        }
        if let use = jwk["use"], use != .string("sig") {
            return .unusable(VerificationError(.keyUseNotSig, "the key named by kid is not a signing key"))
        }
        if let alg = jwk["alg"], alg != .string("RS256") {
            return .unusable(VerificationError(.keyAlgNotRS256, "the key named by kid is not for RS256"))
        }
        guard case .string(let modulusText)? = jwk["n"], case .string(let exponentText)? = jwk["e"],
            let modulus = Base64URL.decode(modulusText.utf8), let exponent = Base64URL.decode(exponentText.utf8),
            modulus.first != 0, exponent.first != 0,
            let key = RSAPublicKey(modulus: modulus, exponent: exponent)
        else {
            return .unusable(VerificationError(.keyInvalid, "the key named by kid has no valid n and e"))
        }
        guard key.modulusBits >= minimumModulusBits else {
            return .unusable(
                VerificationError(.keyTooSmall, "the key named by kid has a \(key.modulusBits)-bit modulus"))
        }
        return .usable(key)
    }
}

/// A JWKS document that cannot be used at all.
public struct JWKSError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
