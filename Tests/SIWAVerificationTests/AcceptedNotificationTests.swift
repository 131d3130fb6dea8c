import Foundation
import SIWATestKit
import SIWAVerification
import Testing

/// Every notification type, in the shape Apple sends and the shape Apple documents.
@Suite("Accepted notifications")
struct AcceptedNotificationTests {
    static let issuedAt = Fixtures.now - 30
    static let eventTime: Int64 = (Fixtures.now - 45) * 1000

    struct Case: Sendable, CustomTestStringConvertible {
        let type: String
        let expected: NotificationEventType
        let email: String?
        let isPrivateEmail: Bool?
        let shape: TestNotification.Shape
        var testDescription: String { "\(type) \(shape == .apple ? "as sent" : "as documented")" }
    }

    static let cases: [Case] = [TestNotification.Shape.apple, .documented].flatMap { shape in
        [
            Case(
                type: "email-disabled", expected: .emailDisabled, email: Fixtures.relayEmail, isPrivateEmail: true,
                shape: shape),
            Case(
                type: "email-enabled", expected: .emailEnabled, email: "user@example.com", isPrivateEmail: false,
                shape: shape),
            Case(type: "consent-revoked", expected: .consentRevoked, email: nil, isPrivateEmail: nil, shape: shape),
            Case(type: "account-deleted", expected: .accountDeleted, email: nil, isPrivateEmail: nil, shape: shape),
        ]
    }

    @Test("each of the four types verifies with every field", arguments: cases)
    func fourTypes(_ testCase: Case) throws {
        let notification = TestNotification(
            type: testCase.type, subject: Fixtures.subject, clientID: Fixtures.clientID, email: testCase.email,
            isPrivateEmail: testCase.isPrivateEmail, eventTimeMilliseconds: Self.eventTime,
            tokenID: "AbCdEfGhIjKlMnOpQrStUv", issuedAt: Self.issuedAt, shape: testCase.shape)
        let body = Array(try notification.requestBody(signedWith: Fixtures.primary).utf8)
        let result = try Fixtures.verifier.verify(body: body, now: Fixtures.now)
        #expect(
            result
                == VerifiedNotification(
                    clientID: Fixtures.clientID, subject: Fixtures.subject, type: testCase.expected,
                    rawType: testCase.type, eventTimeMilliseconds: Self.eventTime, tokenID: "AbCdEfGhIjKlMnOpQrStUv",
                    issuedAt: Self.issuedAt, expiresAt: testCase.shape == .apple ? Self.issuedAt + 86_400 : nil,
                    email: testCase.email, isPrivateEmail: testCase.isPrivateEmail))
    }

    @Test("the real shape: events is a JSON string, event_time in ms, exp = iat + 86400, header {kid, alg}")
    func realShapeOnTheWire() throws {
        let notification = TestNotification(
            type: "consent-revoked", subject: Fixtures.subject, clientID: Fixtures.clientID,
            eventTimeMilliseconds: 1_670_016_125_295, tokenID: "AbCdEfGhIjKlMnOpQrStUv", issuedAt: 1_670_016_126)
        let token = try notification.token(signedWith: Fixtures.primary)
        let parts = Fixtures.segments(token)
        let header = String(decoding: Base64URL.decode(parts[0].utf8)!, as: UTF8.self)
        let claims = String(decoding: Base64URL.decode(parts[1].utf8)!, as: UTF8.self)
        #expect(header == #"{"kid":"test-apple-key-1","alg":"RS256"}"#)
        #expect(
            claims
                == #"{"iss":"https://appleid.apple.com","aud":"com.example.app","exp":1670102526,"iat":1670016126,"jti":"AbCdEfGhIjKlMnOpQrStUv","events":"{\"type\":\"consent-revoked\",\"sub\":\"001234.0123456789abcdef0123456789abcdef.0123\",\"event_time\":1670016125295}"}"#
        )
        let result = try Fixtures.verifier.verify(body: Fixtures.body(token: token), now: 1_670_016_130)
        #expect(result.eventTimeMilliseconds == 1_670_016_125_295)
        #expect(result.expiresAt == 1_670_102_526)
    }

    @Test("account-delete (the older spelling) is the same event as account-deleted")
    func accountDeleteAlias() throws {
        let body = Fixtures.body(
            claims: Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(type: #""account-delete""#))))
        let result = try Fixtures.verifier.verify(body: body, now: Fixtures.now)
        #expect(result.type == .accountDeleted)
        #expect(result.rawType == "account-delete")
    }

    @Test("an unknown type is a value that keeps its raw string, not an error")
    func unknownType() throws {
        let body = Fixtures.body(
            claims: Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(type: #""passkey-added""#))))
        let result = try Fixtures.verifier.verify(body: body, now: Fixtures.now)
        #expect(result.type == .unknown)
        #expect(result.rawType == "passkey-added")
        #expect(result.email == nil)
    }

    @Test(
        "is_private_email accepts the strings and the booleans, and nothing else",
        arguments: [(#""true""#, true), (#""false""#, false), ("true", true), ("false", false)])
    func privateEmailForms(_ raw: String, _ expected: Bool) throws {
        let event = Fixtures.event(
            type: #""email-enabled""#, extra: #""email":"\#(Fixtures.relayEmail)","is_private_email":\#(raw)"#)
        let result = try Fixtures.verifier.verify(
            body: Fixtures.body(claims: Fixtures.claims(events: Fixtures.eventsString(event))), now: Fixtures.now)
        #expect(result.isPrivateEmail == expected)
        #expect(result.email == Fixtures.relayEmail)
    }

    @Test("event_time in seconds and in milliseconds both normalise to milliseconds")
    func eventTimeNormalised() throws {
        for (raw, expected) in [("1508184845", Int64(1_508_184_845_000)), ("1670016125295", 1_670_016_125_295)] {
            let body = Fixtures.body(
                claims: Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(eventTime: raw))))
            #expect(try Fixtures.verifier.verify(body: body, now: Fixtures.now).eventTimeMilliseconds == expected)
        }
    }

    @Test("aud may be an array; the served client ID in it is the match")
    func audienceArray() throws {
        let body = Fixtures.body(claims: Fixtures.claims(aud: #"["com.someone.else","com.example.watch"]"#))
        #expect(try Fixtures.verifier.verify(body: body, now: Fixtures.now).clientID == "com.example.watch")
    }

    @Test("the key is chosen by kid: a token signed with the JWKS's second key verifies")
    func keyChosenByKeyID() throws {
        let body = Fixtures.body(header: Fixtures.header(kid: Fixtures.secondary.keyID), key: Fixtures.secondary)
        #expect(try Fixtures.verifier.verify(body: body, now: Fixtures.now).subject == Fixtures.subject)
    }

    @Test("exp and iat are honoured within the leeway (60 s)")
    func leeway() throws {
        let expiring = Fixtures.body(claims: Fixtures.claims(exp: "\(Fixtures.now - 59)"))
        #expect(Fixtures.refusal(expiring) == nil)
        let early = Fixtures.body(claims: Fixtures.claims(iat: "\(Fixtures.now + 60)"))
        #expect(Fixtures.refusal(early) == nil)
        // Without exp, a token lives a day from iat, as Apple's real tokens do.
        let dayOld = Fixtures.body(claims: Fixtures.claims(exp: nil, iat: "\(Fixtures.now - 86_400 - 59)"))
        #expect(Fixtures.refusal(dayOld) == nil)
    }

    @Test("a body of exactly 64 KiB is within the limit")
    func bodyAtTheLimit() throws {
        var body = Fixtures.body()
        body += [UInt8](repeating: UInt8(ascii: " "), count: 64 * 1024 - body.count)
        #expect(body.count == 65_536)
        #expect(Fixtures.refusal(body) == nil)
    }
}

/// Apple's own documented examples, signed with the test key (Apple's key cannot be had).
@Suite("Apple's documented examples")
struct DocumentedExampleTests {
    static let documentedTime: Int64 = 1_508_184_845

    static let consentRevoked = """
        {
            "iss": "https://appleid.apple.com",
            "aud": "com.mytest.app",
            "iat": 1508184845,
            "jti": "abede...67890",
            "events": {
                "type": "consent-revoked",
                "sub": "820417.faa325acbc78e1be1668ba852d492d8a.0219",
                "event_time": 1508184845
            }
        }
        """

    /// Apple's email example with the comma it lacks restored after "is_private_email".
    static let emailEnabled = """
        {
            "iss": "https://appleid.apple.com",
            "aud": "com.mytest.app",
            "iat": 1508184845,
            "jti": "abede...67890",
            "events": {
                "type": "email-enabled",
                "sub": "820417.faa325acbc78e1be1668ba852d492d8a.0219",
                "email": "ep9ks2tnph@privaterelay.appleid.com",
                "is_private_email": "true",
                "event_time": 1508184845
            }
        }
        """

    static let verifier = NotificationVerifier(keys: Fixtures.keys, clientIDs: ["com.mytest.app"])

    @Test("consent-revoked as documented")
    func consentRevokedExample() throws {
        let body = Fixtures.body(claims: Self.consentRevoked)
        let result = try Self.verifier.verify(body: body, now: Self.documentedTime + 10)
        #expect(
            result
                == VerifiedNotification(
                    clientID: "com.mytest.app", subject: "820417.faa325acbc78e1be1668ba852d492d8a.0219",
                    type: .consentRevoked, rawType: "consent-revoked", eventTimeMilliseconds: 1_508_184_845_000,
                    tokenID: "abede...67890", issuedAt: Self.documentedTime, expiresAt: nil, email: nil,
                    isPrivateEmail: nil))
    }

    @Test("email-enabled as documented, comma restored")
    func emailExample() throws {
        let result = try Self.verifier.verify(
            body: Fixtures.body(claims: Self.emailEnabled), now: Self.documentedTime + 10)
        #expect(result.type == .emailEnabled)
        #expect(result.email == "ep9ks2tnph@privaterelay.appleid.com")
        #expect(result.isPrivateEmail == true)
        #expect(result.eventTimeMilliseconds == 1_508_184_845_000)
    }

    @Test("the original comma-less text is refused as malformed, after the signature checks out")
    func commaLessOriginal() throws {
        let original = Self.emailEnabled.replacingOccurrences(of: "\"true\",", with: "\"true\"")
        #expect(original != Self.emailEnabled)
        let error = try #require(
            Fixtures.refusal(Fixtures.body(claims: original), verifier: Self.verifier, now: Self.documentedTime))
        #expect(error.code == .claimsNotJSON)
        #expect(error.failureClass == .malformed)
    }
}
