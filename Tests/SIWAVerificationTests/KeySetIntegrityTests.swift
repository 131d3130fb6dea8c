import SIWACrypto
import SIWAJSON
import SIWATestKit
import SIWAVerification
import Testing

/// What a key set may hold: a JWK whose numbers are no RSA public key is refused at load;
/// a leading zero octet in `n` is taken as the same number; an unusable entry never
/// displaces a usable key under the same kid; a refusal about our key set is 503.
@Suite("Key set integrity")
struct KeySetIntegrityTests {
    static func document(_ jwks: [JSONValue]) -> [UInt8] {
        Array(JSONWriter.object([("keys", .array(jwks))]).utf8)
    }

    static func keySet(_ jwks: [JSONValue]) throws -> JSONWebKeySet {
        try JSONWebKeySet(jsonBytes: document(jwks))
    }

    static func jwk(_ key: TestSigningKey, replacing overrides: [String: JSONValue] = [:]) -> JSONValue {
        JSONWebKeySetTests.jwk(key, replacing: overrides)
    }

    static var modulus: [UInt8] { try! Fixtures.primary.privateKey.modulus() }

    static func encoded(_ bytes: [UInt8]) -> JSONValue { .string(Base64URL.encode(bytes)) }

    @Test(
        "an exponent or modulus that is no RSA public key is key_invalid (503) at load",
        arguments: [
            ("e = 1: every message would be its own signature", ["e": encoded([1])]),
            ("e = 2, even", ["e": encoded([2])]),
            ("e = 65536, even", ["e": encoded([1, 0, 0])]),
            ("e = n, not below n", ["e": encoded(modulus)]),
            ("e above n", ["e": encoded([1] + modulus)]),
            ("n even", ["n": encoded(modulus.dropLast() + [modulus.last! & 0xFE])]),
            ("n of 16,400 bits", ["n": encoded([0x80] + [UInt8](repeating: 0xFF, count: 2049))]),
        ] as [(String, [String: JSONValue])])
    func notAnRSAPublicKey(_ name: String, _ overrides: [String: JSONValue]) throws {
        let keys = try Self.keySet([Self.jwk(Fixtures.primary, replacing: overrides)])
        #expect(keys.usableKeyIDs.isEmpty, "\(name)")
        #expect(keys.unusableKeyIDs == [Fixtures.primary.keyID], "\(name)")
        let verifier = NotificationVerifier(keys: keys, clientIDs: [Fixtures.clientID])
        let refusal = Fixtures.refusal(Fixtures.body(), verifier: verifier)
        #expect(refusal?.code == .keyInvalid, "\(name)")
        #expect(refusal?.failureClass == .retryable, "\(name)")
    }

    @Test("Apple's exponent 65537 and a 2048-bit odd modulus are a key")
    func validNumbers() {
        #expect(RSAPublicKey.problem(modulus: Self.modulus, exponent: [1, 0, 1]) == nil)
        #expect(RSAPublicKey.problem(modulus: Self.modulus, exponent: [3]) == nil)
        #expect(RSAPublicKey(modulus: Self.modulus, exponent: [1]) == nil)
    }

    @Test("an n with a leading zero octet (a producer's quirk) is the same number: the key verifies")
    func leadingZeroModulus() throws {
        let keys = try Self.keySet([Self.jwk(Fixtures.primary, replacing: ["n": Self.encoded([0] + Self.modulus)])])
        #expect(keys.usableKeyIDs == [Fixtures.primary.keyID])
        let verifier = NotificationVerifier(keys: keys, clientIDs: [Fixtures.clientID])
        #expect(Fixtures.refusal(Fixtures.body(), verifier: verifier) == nil)
    }

    @Test(
        "an unusable entry never displaces a usable key under the same kid: the held key is kept",
        arguments: [
            (
                "a duplicated kid",
                [jwk(Fixtures.primary), jwk(Fixtures.attacker, replacing: ["kid": .string("test-apple-key-1")])]
            ),
            ("alg RS512", [jwk(Fixtures.primary, replacing: ["alg": .string("RS512")])]),
            ("e = 1", [jwk(Fixtures.primary, replacing: ["e": encoded([1])])]),
        ] as [(String, [JSONValue])])
    func unusableEntryKeepsTheHeldKey(_ name: String, _ entries: [JSONValue]) throws {
        let held = Fixtures.keys
        let fetched = try Self.keySet(entries + [Self.jwk(Fixtures.secondary)])
        #expect(fetched.unusableKeyIDs == [Fixtures.primary.keyID], "\(name)")
        let (merged, kept) = fetched.keepingUsableKeys(of: held)
        #expect(kept == [Fixtures.primary.keyID], "\(name)")
        #expect(merged.usableKeyIDs == [Fixtures.primary.keyID, Fixtures.secondary.keyID], "\(name)")
        let verifier = NotificationVerifier(keys: merged, clientIDs: [Fixtures.clientID])
        #expect(Fixtures.refusal(Fixtures.body(), verifier: verifier) == nil, "\(name)")
        // The merged set written out and read back keeps the held key (the cache file's copy).
        let reread = try JSONWebKeySet(jsonBytes: merged.usableKeysDocument())
        #expect(reread.usableKeyIDs == [Fixtures.primary.keyID, Fixtures.secondary.keyID], "\(name)")
        #expect(
            Fixtures.refusal(
                Fixtures.body(), verifier: NotificationVerifier(keys: reread, clientIDs: [Fixtures.clientID]))
                == nil, "\(name)")
    }

    @Test("a usable entry does replace the held key under its kid (a key Apple changes is taken)")
    func usableEntryReplaces() throws {
        let replaced = TestSigningKey(keyID: Fixtures.primary.keyID, privateKey: Fixtures.attacker.privateKey)
        let (merged, kept) = try Self.keySet([Self.jwk(replaced)]).keepingUsableKeys(of: Fixtures.keys)
        #expect(kept.isEmpty)
        let verifier = NotificationVerifier(keys: merged, clientIDs: [Fixtures.clientID])
        #expect(Fixtures.refusal(Fixtures.body(), verifier: verifier)?.code == .signatureInvalid)
        #expect(Fixtures.refusal(Fixtures.body(key: replaced), verifier: verifier) == nil)
    }

    @Test(
        "a refusal about our key set is retryable (503), never a refusal of the token (401)",
        arguments: [
            VerificationError.Code.keyNotRSA, .keyUseNotSig, .keyAlgNotRS256, .keyTooSmall, .keyInvalid,
        ])
    func keySetRefusalsAreRetryable(_ code: VerificationError.Code) {
        #expect(code.failureClass == .retryable)
        #expect(code.isAboutOurKeySet)
    }

    @Test("an unusable entry under the token's kid asks for one refresh; a refresh that brings it fixed verifies")
    func unusableEntryAsksForARefresh() throws {
        let broken = try Self.keySet([Self.jwk(Fixtures.primary, replacing: ["alg": .string("RS512")])])
        let fixed = KeySourceDouble(keys: broken, next: Fixtures.keys)
        #expect(KeySourceRuleTests.code(Fixtures.body(), fixed) == nil)
        #expect(fixed.refreshRequests == 1)
        // Still broken after the refresh: the entry's own code, 503, and Apple retries.
        let stillBroken = KeySourceDouble(keys: broken, next: broken)
        #expect(KeySourceRuleTests.code(Fixtures.body(), stillBroken) == "key_alg_not_rs256")
        #expect(stillBroken.refreshRequests == 1)
        // No refresh could be made: the same.
        let noRefresh = KeySourceDouble(keys: broken, next: nil)
        #expect(KeySourceRuleTests.code(Fixtures.body(), noRefresh) == "key_alg_not_rs256")
        #expect(noRefresh.refreshRequests == 1)
    }

    @Test("a kid is matched byte for byte: a Kelvin sign does not select the key K1")
    func kidComparedAsBytes() throws {
        let k1 = TestSigningKey(keyID: "K1", privateKey: Fixtures.primary.privateKey)
        let verifier = NotificationVerifier(
            keys: try Self.keySet([Self.jwk(k1)]), clientIDs: [Fixtures.clientID])
        // U+212A KELVIN SIGN is canonically equivalent to "K": Swift's == says they are equal.
        let kelvin = "\u{212A}1"
        #expect(kelvin == "K1")
        let body = Fixtures.body(header: Fixtures.header(kid: kelvin), key: k1)
        #expect(Fixtures.refusal(body, verifier: verifier)?.code == .kidUnknown)
        #expect(Fixtures.refusal(Fixtures.body(header: Fixtures.header(kid: "K1"), key: k1), verifier: verifier) == nil)
    }
}

/// The token's times and audience: sums saturate instead of wrapping, `exp` is bounded by
/// `iat`, `nbf` is honoured, and `aud` is matched byte for byte.
@Suite("Claim times and audience")
struct ClaimTimesTests {
    static func code(_ claims: String, verifier: NotificationVerifier = Fixtures.verifier) -> String? {
        Fixtures.refusal(Fixtures.body(claims: claims), verifier: verifier)?.code.rawValue
    }

    @Test(
        "exp more than a day after iat is exp_beyond_lifetime (401), never a wrapped sum",
        arguments: [Int64.max, Int64.max - 60, Int64.max - 86_400, Fixtures.now - 100 + 86_400 + 1])
    func expBeyondLifetime(_ exp: Int64) {
        #expect(Self.code(Fixtures.claims(exp: "\(exp)")) == "exp_beyond_lifetime")
        #expect(VerificationError.Code.expBeyondLifetime.failureClass == .notAuthentic)
    }

    @Test("exp exactly a day after iat (Apple's shape) verifies")
    func expOneDay() {
        #expect(Self.code(Fixtures.claims(exp: "\(Fixtures.now - 100 + 86_400)", iat: "\(Fixtures.now - 100)")) == nil)
    }

    @Test("iat near Int64.max is in the future, not wrapped into the past")
    func iatNearMaximum() {
        #expect(Self.code(Fixtures.claims(exp: nil, iat: "\(Int64.max)")) == "iat_in_future")
        #expect(Self.code(Fixtures.claims(exp: nil, iat: "\(Int64.max - 30)")) == "iat_in_future")
    }

    @Test("nbf is honoured with the 60 s leeway; one that is not a NumericDate is nbf_invalid")
    func notBefore() {
        #expect(Self.code(Fixtures.claims(extra: #""nbf":\#(Fixtures.now + 60)"#)) == nil)
        #expect(Self.code(Fixtures.claims(extra: #""nbf":\#(Fixtures.now - 100)"#)) == nil)
        #expect(Self.code(Fixtures.claims(extra: #""nbf":\#(Fixtures.now + 61)"#)) == "token_not_yet_valid")
        #expect(Self.code(Fixtures.claims(extra: #""nbf":\#(Int64.max)"#)) == "token_not_yet_valid")
        #expect(Self.code(Fixtures.claims(extra: #""nbf":"soon""#)) == "nbf_invalid")
        #expect(Self.code(Fixtures.claims(extra: #""nbf":-1"#)) == "nbf_invalid")
        #expect(VerificationError.Code.tokenNotYetValid.failureClass == .notAuthentic)
        #expect(VerificationError.Code.nbfInvalid.failureClass == .malformed)
    }

    @Test("aud is matched byte for byte, and the configured client ID is the one kept")
    func audienceComparedAsBytes() throws {
        let configured = "com.example.Kapp"
        let verifier = NotificationVerifier(keys: Fixtures.keys, clientIDs: [configured])
        let kelvin = "com.example.\u{212A}app"
        #expect(kelvin == configured)
        #expect(Self.code(Fixtures.claims(aud: "\"\(kelvin)\""), verifier: verifier) == "aud_not_served")
        let accepted = try verifier.verify(
            body: Fixtures.body(claims: Fixtures.claims(aud: "[\"\(kelvin)\",\"\(configured)\"]")), now: Fixtures.now)
        #expect(Array(accepted.clientID.utf8) == Array(configured.utf8))
    }
}
