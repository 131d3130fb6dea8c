import SIWACrypto
import SIWAJSON
import SIWATestKit
import SIWAVerification
import Testing

/// The JWK checks: a kid that names an unusable key fails with that key's reason.
@Suite("JSON Web Key Set")
struct JSONWebKeySetTests {
    static func jwk(_ key: TestSigningKey, replacing overrides: [String: JSONValue] = [:]) -> JSONValue {
        guard case .object(var members) = try! key.publicJWK() else { fatalError("a JWK is an object") }
        for (name, value) in overrides { members[name] = value }
        return .object(members)
    }

    static func verifier(_ jwks: [JSONValue]) throws -> NotificationVerifier {
        let document = JSONWriter.object([("keys", .array(jwks))])
        return NotificationVerifier(
            keys: try JSONWebKeySet(jsonBytes: Array(document.utf8)), clientIDs: [Fixtures.clientID])
    }

    static let small = try! TestSigningKey.generate(keyID: "test-small-key", bits: 1024)

    @Test(
        "an unusable key is refused for its own reason",
        arguments: [
            (["kty": .string("EC")], VerificationError.Code.keyNotRSA),
            (["use": .string("enc")], .keyUseNotSig),
            (["alg": .string("RS512")], .keyAlgNotRS256),
            (["n": .string("not base64url!")], .keyInvalid),
            (["e": .string("")], .keyInvalid),
        ] as [([String: JSONValue], VerificationError.Code)])
    func unusableKey(_ overrides: [String: JSONValue], _ code: VerificationError.Code) throws {
        let verifier = try Self.verifier([Self.jwk(Fixtures.primary, replacing: overrides)])
        #expect(Fixtures.refusal(Fixtures.body(), verifier: verifier)?.code == code)
    }

    @Test("a modulus under 2048 bits is refused")
    func smallModulus() throws {
        let verifier = try Self.verifier([Self.jwk(Self.small)])
        let body = Fixtures.body(header: Fixtures.header(kid: Self.small.keyID), key: Self.small)
        #expect(Fixtures.refusal(body, verifier: verifier)?.code == .keyTooSmall)
    }

    @Test("use and alg are optional in a JWK")
    func optionalMembers() throws {
        let verifier = try Self.verifier([
            Self.jwk(Fixtures.primary, replacing: ["use": .null, "alg": .null]).removingNulls()
        ])
        #expect(Fixtures.refusal(Fixtures.body(), verifier: verifier) == nil)
    }

    @Test("two keys under one kid are both refused, never guessed between")
    func duplicateKeyID() throws {
        let impostor = TestSigningKey(keyID: Fixtures.primary.keyID, privateKey: Fixtures.attacker.privateKey)
        let verifier = try Self.verifier([Self.jwk(Fixtures.primary), Self.jwk(impostor)])
        #expect(Fixtures.refusal(Fixtures.body(), verifier: verifier)?.code == .keyInvalid)
    }

    @Test("no keys loaded is retryable (503), not a refusal")
    func noKeys() {
        let verifier = NotificationVerifier(keys: JSONWebKeySet(), clientIDs: [Fixtures.clientID])
        let error = Fixtures.refusal(Fixtures.body(), verifier: verifier)
        #expect(error?.code == .keysUnavailable)
        #expect(error?.failureClass == .retryable)
    }

    @Test("rotation: a token under the new kid verifies only once the new key is in the set")
    func rotation() throws {
        let next = try TestSigningKey.generate(keyID: "test-apple-key-3")
        let body = Fixtures.body(header: Fixtures.header(kid: next.keyID), key: next)
        #expect(Fixtures.refusal(body)?.code == .kidUnknown)
        let rotated = try Self.verifier([Self.jwk(Fixtures.secondary), Self.jwk(next)])
        #expect(Fixtures.refusal(body, verifier: rotated) == nil)
        #expect(Fixtures.refusal(Fixtures.body(), verifier: rotated)?.code == .kidUnknown)
    }

    @Test("a document that is not a JWKS is an error of its own")
    func notAJWKS() {
        #expect(throws: JWKSError.self) { try JSONWebKeySet(jsonBytes: Array("[]".utf8)) }
        #expect(throws: JWKSError.self) { try JSONWebKeySet(jsonBytes: Array(#"{"keys":{}}"#.utf8)) }
        #expect(throws: JWKSError.self) { try JSONWebKeySet(jsonBytes: Array("not json".utf8)) }
    }

    @Test("the key set lists its kids")
    func keyIDs() {
        #expect(Fixtures.keys.usableKeyIDs == ["test-apple-key-1", "test-apple-key-2"])
    }
}

extension JSONValue {
    fileprivate func removingNulls() -> JSONValue {
        guard case .object(let members) = self else { return self }
        return .object(members.filter { $0.value != .null })
    }
}

/// Each code has one failure class (the responder maps a class to its HTTP status).
@Suite("Error classes")
struct ErrorClassTests {
    @Test("classes by code")
    func statuses() {
        #expect(VerificationError.Code.bodyNotJSON.failureClass == .malformed)
        #expect(VerificationError.Code.bodyTooLarge.failureClass == .tooLarge)
        #expect(VerificationError.Code.signatureInvalid.failureClass == .notAuthentic)
        #expect(VerificationError.Code.algNotAllowed.failureClass == .notAuthentic)
        #expect(VerificationError.Code.kidUnknown.failureClass == .notAuthentic)
        #expect(VerificationError.Code.issMismatch.failureClass == .notAuthentic)
        #expect(VerificationError.Code.tokenExpired.failureClass == .notAuthentic)
        #expect(VerificationError.Code.iatInFuture.failureClass == .notAuthentic)
        #expect(VerificationError.Code.audNotServed.failureClass == .notOurs)
        #expect(VerificationError.Code.keysUnavailable.failureClass == .retryable)
    }

    @Test("every code is distinct")
    func distinctCodes() {
        let all = VerificationError.Code.all.map(\.rawValue)
        #expect(Set(all).count == all.count)
        #expect(all.count == 71)
    }
}
