import SIWACrypto
import SIWAJSON
import SIWATestKit
import SIWAVerification
import Testing

/// The hostile corpus: each case names the exact error code it must produce.
@Suite("Hostile input")
struct HostileInputTests {
    typealias Code = VerificationError.Code

    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let body: @Sendable () -> [UInt8]
        let code: Code
        var testDescription: String { name }
        init(_ name: String, _ code: Code, _ body: @escaping @Sendable () -> [UInt8]) {
            self.name = name
            self.body = body
            self.code = code
        }
    }

    static func rawBody(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// A valid token with one segment replaced.
    static func replacing(segment index: Int, with text: String, in token: String = Fixtures.token()) -> [UInt8] {
        var parts = Fixtures.segments(token)
        parts[index] = text
        return Fixtures.body(token: parts.joined(separator: "."))
    }

    static func withEvent(_ event: String) -> [UInt8] {
        Fixtures.body(claims: Fixtures.claims(events: Fixtures.eventsString(event)))
    }

    static let bodyCases: [Case] = [
        Case("body not JSON", .bodyNotJSON) { rawBody("payload=eyJ") },
        Case("body a JSON array", .bodyNotObject) { rawBody(#"["eyJhbGciOiJSUzI1NiJ9.e30.c2ln"]"#) },
        Case("payload missing", .payloadMissing) { rawBody(#"{"token":"a.b.c"}"#) },
        Case("payload a number", .payloadNotString) { rawBody(#"{"payload":42}"#) },
        Case("payload null", .payloadNotString) { rawBody(#"{"payload":null}"#) },
        Case("the whole body handed over as the token", .bodyNotJSON) { Array(Fixtures.token().utf8) },
        Case("the whole body nested as the payload", .tokenNotBase64URL) {
            Fixtures.body(token: CompactJWSSigner.requestBody(payload: Fixtures.token()))
        },
        Case("payload member given twice", .bodyDuplicateMember) {
            rawBody(#"{"payload":"\#(Fixtures.token())","payload":"a.b.c"}"#)
        },
        Case("body one byte over 64 KiB", .bodyTooLarge) {
            var body = Fixtures.body()
            body += [UInt8](repeating: UInt8(ascii: " "), count: 64 * 1024 + 1 - body.count)
            return body
        },
        Case("arrays nested 32,000 deep, inside the size limit", .bodyTooDeep) {
            rawBody(String(repeating: "[", count: 32_000) + String(repeating: "]", count: 32_000))
        },
        Case("invalid UTF-8 in the body", .bodyNotJSON) { [0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D] },
    ]

    static let compactCases: [Case] = [
        Case("2 segments", .tokenSegmentCount) {
            Fixtures.body(token: Fixtures.segments(Fixtures.token())[0...1].joined(separator: "."))
        },
        Case("4 segments", .tokenSegmentCount) { Fixtures.body(token: Fixtures.token() + ".c2ln") },
        Case("empty claims segment", .tokenEmptySegment) { replacing(segment: 1, with: "") },
        Case("empty header segment", .tokenEmptySegment) { replacing(segment: 0, with: "") },
        Case("= padding", .tokenNotBase64URL) { replacing(segment: 0, with: Fixtures.b64(Fixtures.header()) + "==") },
        Case("+ in a segment", .tokenNotBase64URL) {
            var signature = Fixtures.segments(Fixtures.token())[2]
            signature.replaceSubrange(signature.startIndex...signature.startIndex, with: "+")
            return replacing(segment: 2, with: signature)
        },
        Case("/ in a segment", .tokenNotBase64URL) {
            var signature = Fixtures.segments(Fixtures.token())[2]
            signature.replaceSubrange(signature.startIndex...signature.startIndex, with: "/")
            return replacing(segment: 2, with: signature)
        },
        Case("header not JSON", .headerNotJSON) { replacing(segment: 0, with: Fixtures.b64("kid=1,alg=RS256")) },
        Case("header a JSON string", .headerNotObject) { replacing(segment: 0, with: Fixtures.b64(#""RS256""#)) },
    ]

    static let headerCases: [Case] = [
        Case("alg none with an empty signature", .algNotAllowed) {
            let token = Fixtures.b64(Fixtures.header(alg: "none")) + "." + Fixtures.b64(Fixtures.claims()) + "."
            return Fixtures.body(token: token)
        },
        Case("HS256 signed with the RSA public key as the HMAC secret", .algNotAllowed) {
            let header = Fixtures.b64(Fixtures.header(alg: "HS256"))
            let input = header + "." + Fixtures.b64(Fixtures.claims())
            let secret = Array(Fixtures.jwksDocument.utf8)  // what a confused verifier would use as the secret
            let mac = HMACSHA256.authenticationCode(key: secret, message: Array(input.utf8))
            return Fixtures.body(token: input + "." + Base64URL.encode(mac))
        },
        Case("HS256 with the modulus bytes as the HMAC secret", .algNotAllowed) {
            let header = Fixtures.b64(Fixtures.header(alg: "HS256"))
            let input = header + "." + Fixtures.b64(Fixtures.claims())
            let secret = try! Fixtures.primary.privateKey.modulus()
            let mac = HMACSHA256.authenticationCode(key: secret, message: Array(input.utf8))
            return Fixtures.body(token: input + "." + Base64URL.encode(mac))
        },
        Case("RS512", .algNotAllowed) { Fixtures.body(header: Fixtures.header(alg: "RS512")) },
        Case("PS256", .algNotAllowed) { Fixtures.body(header: Fixtures.header(alg: "PS256")) },
        Case("rs256 in lower case", .algNotAllowed) { Fixtures.body(header: Fixtures.header(alg: "rs256")) },
        Case("alg missing", .algMissing) { Fixtures.body(header: #"{"kid":"test-apple-key-1"}"#) },
        Case("alg a number", .algNotAllowed) { Fixtures.body(header: #"{"kid":"test-apple-key-1","alg":256}"#) },
        Case("alg given twice", .headerDuplicateMember) {
            Fixtures.body(header: #"{"kid":"test-apple-key-1","alg":"RS256","alg":"none"}"#)
        },
        Case("no kid", .kidMissing) { Fixtures.body(header: #"{"alg":"RS256"}"#) },
        Case("kid not a string", .kidInvalid) { Fixtures.body(header: #"{"kid":1,"alg":"RS256"}"#) },
        Case("unknown kid", .kidUnknown) { Fixtures.body(header: Fixtures.header(kid: "no-such-key")) },
        Case("kid of ../../etc/passwd", .kidUnknown) {
            Fixtures.body(header: Fixtures.header(kid: "../../etc/passwd"))
        },
        Case("crit header", .critNotSupported) {
            Fixtures.body(header: #"{"kid":"test-apple-key-1","alg":"RS256","crit":["exp"],"exp":1}"#)
        },
        Case("attacker key embedded as jwk, attacker kid", .kidUnknown) {
            let jwk = JSONWriter.serialize(try! Fixtures.attacker.publicJWK())
            return Fixtures.body(
                header: #"{"kid":"attacker-key","alg":"RS256","jwk":\#(jwk)}"#, key: Fixtures.attacker)
        },
        Case("attacker key embedded as jwk, Apple's kid", .signatureInvalid) {
            let jwk = JSONWriter.serialize(try! Fixtures.attacker.publicJWK())
            return Fixtures.body(
                header: #"{"kid":"test-apple-key-1","alg":"RS256","jwk":\#(jwk)}"#, key: Fixtures.attacker)
        },
        Case("jku pointing elsewhere, signed by the attacker", .signatureInvalid) {
            Fixtures.body(
                header: #"{"kid":"test-apple-key-1","alg":"RS256","jku":"https://attacker.example/keys"}"#,
                key: Fixtures.attacker)
        },
        Case("x5u pointing elsewhere, signed by the attacker", .signatureInvalid) {
            Fixtures.body(
                header: #"{"kid":"test-apple-key-1","alg":"RS256","x5u":"https://attacker.example/cert.pem"}"#,
                key: Fixtures.attacker)
        },
    ]

    static let signatureCases: [Case] = [
        Case("one bit of the signature flipped", .signatureInvalid) {
            var signature = Base64URL.decode(Fixtures.segments(Fixtures.token())[2].utf8)!
            signature[100] ^= 0x01
            return replacing(segment: 2, with: Base64URL.encode(signature))
        },
        Case("signature one byte short", .signatureLengthMismatch) {
            let signature = Base64URL.decode(Fixtures.segments(Fixtures.token())[2].utf8)!
            return replacing(segment: 2, with: Base64URL.encode(signature.dropLast()))
        },
        Case("signature one byte long", .signatureLengthMismatch) {
            let signature = Base64URL.decode(Fixtures.segments(Fixtures.token())[2].utf8)!
            return replacing(segment: 2, with: Base64URL.encode(signature + [0]))
        },
        Case("RS256 with an empty signature", .signatureLengthMismatch) {
            Fixtures.body(token: Fixtures.b64(Fixtures.header()) + "." + Fixtures.b64(Fixtures.claims()) + ".")
        },
        Case("claims changed after signing", .signatureInvalid) {
            let forged = Fixtures.claims(aud: #""com.example.watch""#)
            return replacing(segment: 1, with: Fixtures.b64(forged))
        },
        Case("signed by a key not in the JWKS under Apple's kid", .signatureInvalid) {
            Fixtures.body(key: Fixtures.attacker)
        },
    ]

    static let claimsCases: [Case] = [
        Case("claims not JSON", .claimsNotJSON) { Fixtures.body(claims: "iss=https://appleid.apple.com") },
        Case("claims a JSON array", .claimsNotObject) { Fixtures.body(claims: "[]") },
        Case("claims nested too deep", .claimsTooDeep) {
            Fixtures.body(
                claims: Fixtures.claims(
                    extra: #""x":"# + String(repeating: "[", count: 40) + String(repeating: "]", count: 40)))
        },
        Case("a claim given twice", .claimsDuplicateMember) {
            Fixtures.body(claims: Fixtures.claims(extra: #""aud":"com.example.app""#))
        },
        Case("wrong iss", .issMismatch) {
            Fixtures.body(claims: Fixtures.claims(iss: #""https://appleid.example.com""#))
        },
        Case("iss with a trailing slash", .issMismatch) {
            Fixtures.body(claims: Fixtures.claims(iss: #""https://appleid.apple.com/""#))
        },
        Case("iss missing", .issMissing) { Fixtures.body(claims: Fixtures.claims(iss: nil)) },
        Case("aud of another app", .audNotServed) { Fixtures.body(claims: Fixtures.claims(aud: #""com.other.app""#)) },
        Case("aud array without ours", .audNotServed) {
            Fixtures.body(claims: Fixtures.claims(aud: #"["com.other.app","com.third.app"]"#))
        },
        Case("aud missing", .audMissing) { Fixtures.body(claims: Fixtures.claims(aud: nil)) },
        Case("aud a number", .audInvalid) { Fixtures.body(claims: Fixtures.claims(aud: "7")) },
        Case("aud an empty array", .audInvalid) { Fixtures.body(claims: Fixtures.claims(aud: "[]")) },
        Case("expired", .tokenExpired) { Fixtures.body(claims: Fixtures.claims(exp: "\(Fixtures.now - 61)")) },
        Case("no exp, issued more than a day (plus leeway) ago", .tokenExpired) {
            Fixtures.body(claims: Fixtures.claims(exp: nil, iat: "\(Fixtures.now - 86_400 - 60)"))
        },
        Case("exp a string", .expInvalid) { Fixtures.body(claims: Fixtures.claims(exp: #""tomorrow""#)) },
        Case("iat in the future", .iatInFuture) { Fixtures.body(claims: Fixtures.claims(iat: "\(Fixtures.now + 61)")) },
        Case("iat missing", .iatMissing) { Fixtures.body(claims: Fixtures.claims(iat: nil)) },
        Case("iat negative", .iatInvalid) { Fixtures.body(claims: Fixtures.claims(iat: "-5")) },
        Case("no jti", .jtiMissing) { Fixtures.body(claims: Fixtures.claims(jti: nil)) },
        Case("jti empty", .jtiInvalid) { Fixtures.body(claims: Fixtures.claims(jti: #""""#)) },
        Case("jti of 257 characters", .jtiInvalid) {
            Fixtures.body(claims: Fixtures.claims(jti: "\"" + String(repeating: "j", count: 257) + "\""))
        },
        Case("events missing", .eventsMissing) { Fixtures.body(claims: Fixtures.claims(events: nil)) },
    ]

    static let eventCases: [Case] = [
        Case("events an array", .eventsWrongType) {
            Fixtures.body(claims: Fixtures.claims(events: "[" + Fixtures.event() + "]"))
        },
        Case("events a number", .eventsWrongType) { Fixtures.body(claims: Fixtures.claims(events: "1")) },
        Case("events a string of invalid JSON", .eventsNotJSON) {
            Fixtures.body(claims: Fixtures.claims(events: #""{\"type\":\"consent-revoked\",""#))
        },
        Case("events a string holding an array", .eventsNotObject) {
            Fixtures.body(claims: Fixtures.claims(events: Fixtures.eventsString("[" + Fixtures.event() + "]")))
        },
        Case("a member of the event given twice", .eventsDuplicateMember) {
            withEvent(Fixtures.event(extra: #""type":"email-enabled""#))
        },
        Case("event without type", .eventTypeMissing) { withEvent(Fixtures.event(type: nil)) },
        Case("event type a number", .eventTypeInvalid) { withEvent(Fixtures.event(type: "3")) },
        Case("event without sub", .eventSubMissing) { withEvent(Fixtures.event(sub: nil)) },
        Case("event sub empty", .eventSubInvalid) { withEvent(Fixtures.event(sub: #""""#)) },
        Case("event sub with a brace (Redis hash tag)", .eventSubInvalid) {
            withEvent(Fixtures.event(sub: #""abc}def""#))
        },
        Case("event without event_time", .eventTimeMissing) { withEvent(Fixtures.event(eventTime: nil)) },
        Case("event_time a string", .eventTimeInvalid) { withEvent(Fixtures.event(eventTime: #""1670016125295""#)) },
        Case("event_time a fraction", .eventTimeInvalid) { withEvent(Fixtures.event(eventTime: "1670016125.5")) },
        // iat is now - 100 and the leeway 60 s: one second past iat + leeway is refused.
        Case("event_time after iat plus the leeway", .eventTimeInFuture) {
            withEvent(Fixtures.event(eventTime: "\((Fixtures.now - 100 + 61) * 1000)"))
        },
        Case("event_time in seconds after iat plus the leeway", .eventTimeInFuture) {
            withEvent(Fixtures.event(eventTime: "\(Fixtures.now - 100 + 61)"))
        },
        Case("is_private_email of \"yes\"", .isPrivateEmailInvalid) {
            withEvent(
                Fixtures.event(type: #""email-disabled""#, extra: #""email":"a@b.example","is_private_email":"yes""#))
        },
        Case("is_private_email of 1", .isPrivateEmailInvalid) {
            withEvent(Fixtures.event(type: #""email-disabled""#, extra: #""email":"a@b.example","is_private_email":1"#))
        },
        Case("email event without email", .emailMissing) {
            withEvent(Fixtures.event(type: #""email-enabled""#, extra: #""is_private_email":"true""#))
        },
        Case("email event with a numeric email", .emailInvalid) {
            withEvent(Fixtures.event(type: #""email-enabled""#, extra: #""email":5"#))
        },
    ]

    @Test("the body and its envelope", arguments: bodyCases)
    func body(_ testCase: Case) { expectRefusal(testCase) }

    @Test("JSON nested 100,000 deep is refused without a crash, even with the size limit raised")
    func nestedVeryDeep() {
        let verifier = NotificationVerifier(
            keys: Fixtures.keys, clientIDs: [Fixtures.clientID], maximumBodyBytes: 1024 * 1024)
        let arrays = Self.rawBody(String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000))
        #expect(Fixtures.refusal(arrays, verifier: verifier)?.code == .bodyTooDeep)
        let objects = Self.rawBody(
            #"{"payload":"# + String(repeating: #"{"a":"#, count: 100_000) + "1"
                + String(repeating: "}", count: 100_001))
        #expect(Fixtures.refusal(objects, verifier: verifier)?.code == .bodyTooDeep)
        // And with the default limit, the size check answers first.
        #expect(Fixtures.refusal(arrays)?.code == .bodyTooLarge)
    }

    @Test("the compact JWS", arguments: compactCases)
    func compact(_ testCase: Case) { expectRefusal(testCase) }

    @Test("the header and the key", arguments: headerCases)
    func header(_ testCase: Case) { expectRefusal(testCase) }

    @Test("the signature", arguments: signatureCases)
    func signature(_ testCase: Case) { expectRefusal(testCase) }

    @Test("the claims", arguments: claimsCases)
    func claims(_ testCase: Case) { expectRefusal(testCase) }

    @Test("the events claim", arguments: eventCases)
    func events(_ testCase: Case) { expectRefusal(testCase) }

    func expectRefusal(_ testCase: Case) {
        let body = testCase.body()
        let error = Fixtures.refusal(body)
        #expect(error?.code == testCase.code, "\(testCase.name): got \(error?.description ?? "no error")")
        // Messages never quote the sender's data.
        if let message = error?.message {
            #expect(!message.contains(Fixtures.subject))
            #expect(!message.contains("eyJ"))
            #expect(!message.contains("@"))
        }
    }
}
