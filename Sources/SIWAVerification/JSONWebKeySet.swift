import SIWACrypto
import SIWAJSON

/// Apple's signing keys, looked up by `kid` and never by position.
///
/// Every JWK is checked once when the set is built: an unusable key keeps the
/// reason, so a token that names it fails with that reason, not a vague one. Such a
/// refusal is about our key set, not about the token: its codes are retryable (503).
///
/// A `kid` is matched byte for byte (its UTF-8), never by Swift's `String` equality,
/// which treats canonically equivalent spellings as equal (a Kelvin sign would select
/// the key `K1`).
public struct JSONWebKeySet: Sendable {
    public static let minimumModulusBits = 2048

    enum Entry: Sendable {
        /// A key that can verify, with its JWK as published (to write a merged set to disk).
        case usable(RSAPublicKey, jwk: JSONValue)
        case unusable(VerificationError)
    }

    /// What the set holds, in one object: a set is copied wherever a verification captures
    /// it, and a copy is then one reference counted, not one for each part.
    private final class Storage: Sendable {
        /// Keyed by the kid's UTF-8 bytes.
        let entries: [[UInt8]: Entry]
        /// The usable keys again, in a list, when there are at most `listedKeysLimit`: a set
        /// holds a handful of keys, and a token's kid is found sooner by comparing its bytes
        /// down the list than by hashing it (an array of bytes hashes byte by byte). A kid
        /// not in the list is looked up in `entries`, which answers for the unusable and
        /// the unknown.
        let listedKeys: [(keyID: [UInt8], key: RSAPublicKey)]
        let usableKeyIDs: [String]
        let unusableKeyIDs: [String]
        let issuer: String?

        init(entries: [[UInt8]: Entry], issuer: String?) {
            self.entries = entries
            self.issuer = issuer
            var usable: [String] = []
            var unusable: [String] = []
            var listed: [(keyID: [UInt8], key: RSAPublicKey)] = []
            for (kid, entry) in entries {
                switch entry {
                case .usable(let key, _):
                    usable.append(String(decoding: kid, as: UTF8.self))
                    listed.append((kid, key))
                case .unusable: unusable.append(String(decoding: kid, as: UTF8.self))
                }
            }
            usableKeyIDs = usable.sorted()
            unusableKeyIDs = unusable.sorted()
            listedKeys = listed.count <= JSONWebKeySet.listedKeysLimit ? listed : []
        }
    }

    private let storage: Storage
    private var entries: [[UInt8]: Entry] { storage.entries }
    static let listedKeysLimit = 16

    /// The `kid` values of the keys that can verify, sorted.
    public var usableKeyIDs: [String] { storage.usableKeyIDs }

    /// The issuer published with the keys, when the document carries one: a Security Event
    /// Token's `iss` must equal it. Google's keys are kept with the `issuer` of the
    /// `risc-configuration` document they were found through (see the RISC discovery
    /// fetcher), so a restart from the cache file knows both. Apple's path never reads it.
    public var issuer: String? { storage.issuer }

    /// The `kid` values whose entry cannot verify (a duplicated kid, a bad `n` or `e`, an
    /// `alg` other than RS256...), sorted: counted in the metrics and alerted on.
    public var unusableKeyIDs: [String] { storage.unusableKeyIDs }

    /// The entries that cannot verify, by kid (sorted), each with its refusal.
    public var unusableEntries: [(keyID: String, reason: VerificationError)] {
        unusableKeyIDs.compactMap { kid in
            if case .unusable(let reason)? = entries[Array(kid.utf8)] { (kid, reason) } else { nil }
        }
    }

    /// Every `kid` in the set, sorted.
    public var keyIDs: [String] { (usableKeyIDs + unusableKeyIDs).sorted() }

    public var isEmpty: Bool { entries.isEmpty }

    /// An empty set: every verification answers `keys_unavailable`.
    public init() {
        self.init(entries: [:], issuer: nil)
    }

    private init(entries: [[UInt8]: Entry], issuer: String?) {
        storage = Storage(entries: entries, issuer: issuer)
    }

    /// Parses a JWKS document (`{"keys": [...]}`).
    public init(jsonBytes: some Collection<UInt8>) throws(JWKSError) {
        let document: JSONValue
        do { document = try StrictJSONParser.parse(jsonBytes) } catch { throw JWKSError("the JWKS is not valid JSON") }
        guard case .object(let members) = document, case .array(let keys)? = members["keys"] else {
            throw JWKSError("the JWKS has no \"keys\" array")
        }
        let issuer: String?
        switch members["issuer"] {
        case nil: issuer = nil
        case .string(let text)? where !text.isEmpty && text.utf8.count <= 256: issuer = text
        default: throw JWKSError("the JWKS's \"issuer\" is not a string of 1 to 256 bytes")
        }
        var entries: [[UInt8]: Entry] = [:]
        var duplicated: Set<[UInt8]> = []
        for key in keys {
            guard case .object(let jwk) = key, case .string(let kid)? = jwk["kid"], !kid.isEmpty else { continue }
            let kidBytes = Array(kid.utf8)
            if entries[kidBytes] != nil { duplicated.insert(kidBytes) }
            entries[kidBytes] = Self.entry(for: jwk)
        }
        for kid in duplicated {
            // Two keys under one kid: refuse both rather than guess.
            entries[kid] = .unusable(VerificationError(.keyInvalid, "the JWKS holds more than one key with this kid"))
        }
        self.init(entries: entries, issuer: issuer)
    }

    /// The key for `kid`, with no fallback to any other key.
    public func key(forKeyID kid: String) throws(VerificationError) -> RSAPublicKey {
        guard !storage.entries.isEmpty else { throw VerificationError(.keysUnavailable, "no signing keys are loaded") }
        if let key = listedKey(forKeyID: kid) { return key }
        switch entries[Array(kid.utf8)] {
        case .usable(let key, _)?: return key
        case .unusable(let error)?: throw error
        case nil: throw VerificationError(.kidUnknown, "no key in the JWKS has the token's kid")
        }
    }

    /// The usable key whose kid has exactly the bytes of `kid`, from `listedKeys`; nil when
    /// none there has them.
    private func listedKey(forKeyID kid: String) -> RSAPublicKey? {
        let found = kid.utf8.withContiguousStorageIfAvailable { kidBytes -> RSAPublicKey? in
            for listed in storage.listedKeys where listed.keyID.count == kidBytes.count {
                let same = listed.keyID.withUnsafeBufferPointer { keyID in
                    kidBytes.isEmpty
                        || PlainJSONReader.sameBytes(keyID.baseAddress!, kidBytes.baseAddress!, count: kidBytes.count)
                }
                if same { return listed.key }
            }
            return nil
        }
        return found ?? nil
    }

    /// This set, except that where one of its entries is unusable and `held` has a usable
    /// key under the same kid, the held key stays: a broken entry (a bad merge that
    /// duplicated a kid, a damaged `n`) never displaces a key that verifies. `kept` lists
    /// those kids, sorted; empty when the set is taken as it is.
    public func keepingUsableKeys(of held: JSONWebKeySet) -> (keySet: JSONWebKeySet, kept: [String]) {
        var merged = entries
        var kept: [String] = []
        for (kid, entry) in entries {
            guard case .unusable = entry, case .usable? = held.entries[kid] else { continue }
            merged[kid] = held.entries[kid]
            kept.append(String(decoding: kid, as: UTF8.self))
        }
        guard !kept.isEmpty else { return (self, []) }
        return (JSONWebKeySet(entries: merged, issuer: issuer), kept.sorted())
    }

    /// A JWKS document holding the usable keys of this set, as published: what the cache
    /// file keeps when a merge kept older keys, so a restart keeps them too.
    public func usableKeysDocument() -> [UInt8] {
        let jwks = entries.sorted { $0.key.lexicographicallyPrecedes($1.key) }.compactMap { entry -> JSONValue? in
            if case .usable(_, let jwk) = entry.value { jwk } else { nil }
        }
        var output: [UInt8] = []
        let issuerMember: [(String, JSONValue)] = issuer.map { [("issuer", .string($0))] } ?? []
        JSONWriter.writeObject(issuerMember + [("keys", .array(jwks))], to: &output)
        return output
    }

    private static func entry(for jwk: [String: JSONValue]) -> Entry {
        guard case .string(let kty)? = jwk["kty"], kty.utf8.elementsEqual("RSA".utf8) else {
            return .unusable(VerificationError(.keyNotRSA, "the key named by kid is not an RSA key"))
        }
        if let use = jwk["use"] {
            guard case .string(let text) = use, text.utf8.elementsEqual("sig".utf8) else {
                return .unusable(VerificationError(.keyUseNotSig, "the key named by kid is not a signing key"))
            }
        }
        if let alg = jwk["alg"] {
            guard case .string(let text) = alg, text.utf8.elementsEqual("RS256".utf8) else {
                return .unusable(VerificationError(.keyAlgNotRS256, "the key named by kid is not for RS256"))
            }
        }
        guard case .string(let modulusText)? = jwk["n"], case .string(let exponentText)? = jwk["e"],
            let modulusBytes = Base64URL.decode(modulusText.utf8),
            let exponentBytes = Base64URL.decode(exponentText.utf8)
        else {
            return .unusable(VerificationError(.keyInvalid, "the key named by kid has no base64url n and e"))
        }
        // Leading zero octets are accepted and dropped: RFC 7518 says n has none, but a
        // known producer quirk adds one (a signed-integer encoding), and the number is the
        // same. The checks below look at the number itself.
        let modulus = Array(modulusBytes.drop { $0 == 0 })
        let exponent = Array(exponentBytes.drop { $0 == 0 })
        if let problem = RSAPublicKey.problem(modulus: modulus, exponent: exponent) {
            return .unusable(VerificationError(.keyInvalid, "the key named by kid is not a valid RSA key: \(problem)"))
        }
        guard let key = RSAPublicKey(modulus: modulus, exponent: exponent) else {
            return .unusable(VerificationError(.keyInvalid, "OpenSSL refuses the n and e of the key named by kid"))
        }
        guard key.modulusBits >= minimumModulusBits else {
            return .unusable(
                VerificationError(.keyTooSmall, "the key named by kid has a \(key.modulusBits)-bit modulus"))
        }
        return .usable(key, jwk: .object(jwk))
    }
}

/// A JWKS document that cannot be used at all.
public struct JWKSError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
