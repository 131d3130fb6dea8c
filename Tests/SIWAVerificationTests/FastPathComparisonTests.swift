import SIWACrypto
import SIWAJSON
import SIWATestKit
import Testing

@testable import SIWAVerification

/// The fast path's byte comparisons, each at every position: member names (compared a word
/// at a time for duplicates), the issuer and the client ID (compared with configured
/// text), and a token's kid (found in the key set's short list, or past its limit in the
/// dictionary). A comparison that skipped a byte, or read one word too few, would take a
/// value that differs in one byte for the configured one.
@Suite("Fast path comparisons, byte by byte")
struct FastPathComparisonTests {
    /// `text` with the byte at `position` changed to another letter.
    static func changing(_ text: String, at position: Int) -> String {
        var bytes = Array(text.utf8)
        bytes[position] = bytes[position] == UInt8(ascii: "x") ? UInt8(ascii: "y") : UInt8(ascii: "x")
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The names the reader read from `document`, or nil when it left it to the strict parser;
    /// read twice, with the document against an inaccessible page at its end and at its start.
    static func names(_ document: String) -> [String]? {
        let region = FastPathAdversaryTests.GuardedRegion()
        let read = { (bytes: UnsafeBufferPointer<UInt8>) -> [String]? in
            PlainJSONReader.withObject(bytes, in: 0..<bytes.count) { members in
                members.map { bytes.string($0.nameStart..<$0.nameEnd) }
            }
        }
        let atEnd = region.atEnd(Array(document.utf8), read)
        let atStart = region.atStart(Array(document.utf8), read)
        #expect(atEnd == atStart, "\(document)")
        return atEnd
    }

    @Test("names of 1 to 24 bytes: the same name twice is left to the strict parser; one byte apart, both are read")
    func namesComparedAtEveryPosition() {
        let alphabet = Array("abcdefghijklmnopqrstuvwx")
        for length in 1...24 {
            let name = String(alphabet[0..<length])
            #expect(Self.names(#"{"\#(name)":1,"\#(name)":2}"#) == nil, "\(name) twice")
            // A third member between them: the duplicate is found past the one before it too.
            #expect(Self.names(#"{"\#(name)":1,"z":0,"\#(name)":2}"#) == nil, "\(name) twice, apart")
            for position in 0..<length {
                let other = Self.changing(name, at: position)
                #expect(Self.names(#"{"\#(name)":1,"\#(other)":2}"#) == [name, other], "\(name) and \(other)")
            }
        }
    }

    @Test("aud one byte away from a long configured client ID, at any position, is not served")
    func clientIDComparedAtEveryPosition() throws {
        let configured = "com.example.a-long-client-id-with-a-tail-1"
        let verifier = NotificationVerifier(keys: Fixtures.keys, clientIDs: [configured])
        let served = Fixtures.body(claims: Fixtures.claims(aud: "\"\(configured)\""))
        #expect(verifier.fastPathReads(body: served, now: Fixtures.now))
        #expect(try verifier.verify(body: served, now: Fixtures.now).clientID == configured)
        for position in 0..<configured.utf8.count {
            let other = Self.changing(configured, at: position)
            for aud in ["\"\(other)\"", "[\"\(other)\"]"] {
                let body = Fixtures.body(claims: Fixtures.claims(aud: aud))
                #expect(!verifier.fastPathReads(body: body, now: Fixtures.now), "\(aud)")
                #expect(Fixtures.refusal(body, verifier: verifier)?.code == .audNotServed, "\(aud)")
            }
        }
    }

    @Test("iss one byte away from Apple's, at any position, is iss_mismatch")
    func appleIssuerComparedAtEveryPosition() {
        let issuer = NotificationVerifier.appleIssuer
        for position in 0..<issuer.utf8.count {
            let other = Self.changing(issuer, at: position)
            let body = Fixtures.body(claims: Fixtures.claims(iss: "\"\(other)\""))
            #expect(!Fixtures.verifier.fastPathReads(body: body, now: Fixtures.now), "\(other)")
            #expect(Fixtures.refusal(body)?.code == .issMismatch, "\(other)")
        }
    }

    @Test("a SET's iss one byte away from the keys' issuer, or aud from a client ID, at any position, is refused")
    func googleIssuerAndAudienceComparedAtEveryPosition() {
        let tests = SecurityEventVerifierTests.self
        let verifier = tests.verifier
        func outcome(_ claims: String) -> (fast: Bool, code: VerificationError.Code?) {
            let token = Array(try! TestSecurityEvent.signed(claims: claims, key: Fixtures.primary).utf8)
            let fast = verifier.fastPathReads(token: token, issuer: tests.issuer, now: tests.now)
            do {
                _ = try verifier.verify(token: token, keys: Fixtures.keys, issuer: tests.issuer, now: tests.now)
                return (fast, nil)
            } catch { return (fast, error.code) }
        }
        let accepted = outcome(tests.claims())
        #expect(accepted.fast && accepted.code == nil)
        for position in 0..<tests.issuer.utf8.count {
            let other = Self.changing(tests.issuer, at: position)
            let refused = outcome(tests.claims(iss: "\"\(other)\""))
            #expect(!refused.fast && refused.code == .issMismatch, "\(other)")
        }
        for position in 0..<tests.clientID.utf8.count {
            let other = Self.changing(tests.clientID, at: position)
            let refused = outcome(tests.claims(aud: "\"\(other)\""))
            #expect(!refused.fast && refused.code == .audNotServed, "\(other)")
        }
    }

    /// A key set of `count` usable entries under kids `kid-long-enough-to-span-words-NN`, the
    /// even ones holding the primary test key and the odd ones the secondary.
    static func keySet(count: Int) throws -> (keys: JSONWebKeySet, kids: [String]) {
        let kids = (0..<count).map { "kid-long-enough-to-span-words-\($0 < 10 ? "0" : "")\($0)" }
        let jwks = kids.enumerated().map { index, kid in
            JSONWebKeySetTests.jwk(
                TestSigningKey(
                    keyID: kid, privateKey: (index.isMultiple(of: 2) ? Fixtures.primary : Fixtures.secondary).privateKey
                ))
        }
        let document = JSONWriter.object([("keys", .array(jwks))])
        return (try JSONWebKeySet(jsonBytes: Array(document.utf8)), kids)
    }

    @Test(
        "each kid selects its own key; a kid one byte away is kid_unknown (within the listed keys' limit and past it)",
        arguments: [2, JSONWebKeySet.listedKeysLimit, JSONWebKeySet.listedKeysLimit + 1])
    func keyIDComparedAtEveryPosition(count: Int) throws {
        let (keys, kids) = try Self.keySet(count: count)
        let verifier = NotificationVerifier(keys: keys, clientIDs: [Fixtures.clientID])
        for (index, kid) in kids.enumerated() {
            let own = index.isMultiple(of: 2) ? Fixtures.primary : Fixtures.secondary
            let other = index.isMultiple(of: 2) ? Fixtures.secondary : Fixtures.primary
            #expect(
                Fixtures.refusal(Fixtures.body(header: Fixtures.header(kid: kid), key: own), verifier: verifier) == nil)
            #expect(
                Fixtures.refusal(Fixtures.body(header: Fixtures.header(kid: kid), key: other), verifier: verifier)?.code
                    == .signatureInvalid)
        }
        let kid = kids[count - 1]
        for position in 0..<kid.utf8.count {
            let other = Self.changing(kid, at: position)
            #expect(throws: VerificationError.self) { try keys.key(forKeyID: other) }
            let body = Fixtures.body(header: Fixtures.header(kid: other))
            #expect(Fixtures.refusal(body, verifier: verifier)?.code == .kidUnknown, "\(other)")
        }
        // A prefix and an extension of a held kid are other kids.
        for other in [String(kid.dropLast()), kid + "0"] {
            #expect(
                Fixtures.refusal(Fixtures.body(header: Fixtures.header(kid: other)), verifier: verifier)?.code
                    == .kidUnknown)
        }
    }

    @Test("an unusable entry beside listed usable keys keeps its own reason")
    func unusableBesideListedKeys() throws {
        let broken = TestSigningKey(keyID: "test-apple-key-3", privateKey: Fixtures.primary.privateKey)
        let jwks = [
            JSONWebKeySetTests.jwk(Fixtures.primary), JSONWebKeySetTests.jwk(Fixtures.secondary),
            JSONWebKeySetTests.jwk(broken, replacing: ["alg": .string("RS512")]),
        ]
        let keys = try JSONWebKeySet(jsonBytes: Array(JSONWriter.object([("keys", .array(jwks))]).utf8))
        let verifier = NotificationVerifier(keys: keys, clientIDs: [Fixtures.clientID])
        let body = Fixtures.body(header: Fixtures.header(kid: broken.keyID), key: broken)
        #expect(Fixtures.refusal(body, verifier: verifier)?.code == .keyAlgNotRS256)
        #expect(Fixtures.refusal(Fixtures.body(), verifier: verifier) == nil)
    }
}
