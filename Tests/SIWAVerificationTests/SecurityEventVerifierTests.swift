import SIWACrypto
import SIWAJSON
import SIWATestKit
import SIWAVerification
import Testing

/// Google's Security Event Tokens: every event type accepted with what it carries, and every
/// refusal with its own code and its RFC 8935 answer. Real RS256 signatures over exact text.
@Suite("Security Event Token verification")
struct SecurityEventVerifierTests {
    static let clientID = "1234567890-abc.apps.googleusercontent.com"
    static let otherClientID = "1234567890-web.apps.googleusercontent.com"
    static let sub = "7375626A656374"
    static let issuer = TestSecurityEvent.issuer
    static let now = Fixtures.now
    static let verifier = SecurityEventVerifier(clientIDs: [clientID, otherClientID])

    static func claims(
        iss: String? = #""https://accounts.google.com/""#, aud: String? = "\"\(clientID)\"",
        iat: String? = "\(now - 30)", jti: String? = #""set-jti-1""#,
        events: String? =
            #"{"https://schemas.openid.net/secevent/risc/event-type/sessions-revoked":{"subject":{"subject_type":"iss-sub","iss":"https://accounts.google.com/","sub":"7375626A656374"}}}"#,
        extra: String = ""
    ) -> String {
        var members: [String] = []
        if let iss { members.append(#""iss":\#(iss)"#) }
        if let aud { members.append(#""aud":\#(aud)"#) }
        if let iat { members.append(#""iat":\#(iat)"#) }
        if let jti { members.append(#""jti":\#(jti)"#) }
        if let events { members.append(#""events":\#(events)"#) }
        if !extra.isEmpty { members.append(extra) }
        return "{" + members.joined(separator: ",") + "}"
    }

    static func events(_ uri: String, _ payload: String) -> String { "{\"\(uri)\":\(payload)}" }
    static let risc = "https://schemas.openid.net/secevent/risc/event-type/"
    static let oauth = "https://schemas.openid.net/secevent/oauth/event-type/"

    static func verify(
        claims: String = claims(), key: TestSigningKey = Fixtures.primary, typ: String? = "secevent+jwt"
    ) throws(VerificationError) -> VerifiedSecurityEvent {
        let token = try! TestSecurityEvent.signed(claims: claims, key: key, typ: typ)
        return try verifier.verify(token: Array(token.utf8), keys: Fixtures.keys, issuer: issuer, now: now)
    }

    static func refusal(_ claims: String, key: TestSigningKey = Fixtures.primary, typ: String? = "secevent+jwt")
        -> VerificationError?
    {
        do {
            _ = try verify(claims: claims, key: key, typ: typ)
            return nil
        } catch { return error }
    }

    @Test("sessions-revoked with an iss-sub subject: the account, the client ID, jti and iat")
    func sessionsRevoked() throws {
        let set = try Self.verify()
        #expect(set.clientIDs == [Self.clientID])
        #expect(set.tokenID == "set-jti-1")
        #expect(set.issuedAt == Self.now - 30)
        #expect(set.eventTimeMilliseconds == (Self.now - 30) * 1000)
        #expect(
            set.events == [
                SecurityEvent(type: .sessionsRevoked, rawType: Self.risc + "sessions-revoked", subject: Self.sub)
            ])
        #expect(set.events[0].endsSessions)
    }

    @Test("every type Google lists is read with its own members")
    func everyType() throws {
        let subject =
            #"{"subject":{"subject_type":"iss-sub","iss":"https://accounts.google.com/","sub":"7375626A656374"}}"#
        let cases: [(String, String, SecurityEvent)] = [
            (
                Self.oauth + "tokens-revoked", subject,
                SecurityEvent(type: .tokensRevoked, rawType: Self.oauth + "tokens-revoked", subject: Self.sub)
            ),
            (
                Self.risc + "account-disabled",
                #"{"subject":{"subject_type":"iss-sub","iss":"https://accounts.google.com/","sub":"7375626A656374"},"reason":"hijacking"}"#,
                SecurityEvent(
                    type: .accountDisabled, rawType: Self.risc + "account-disabled", subject: Self.sub,
                    reason: "hijacking")
            ),
            (
                Self.risc + "account-enabled", subject,
                SecurityEvent(type: .accountEnabled, rawType: Self.risc + "account-enabled", subject: Self.sub)
            ),
            (
                Self.risc + "account-credential-change-required", subject,
                SecurityEvent(
                    type: .accountCredentialChangeRequired, rawType: Self.risc + "account-credential-change-required",
                    subject: Self.sub)
            ),
            (
                Self.risc + "verification", #"{"state":"c3RhdGUtMQ"}"#,
                SecurityEvent(
                    type: .verification, rawType: Self.risc + "verification", subject: nil, state: "c3RhdGUtMQ")
            ),
            (
                Self.oauth + "token-revoked",
                #"{"subject":{"subject_type":"oauth_token","token_type":"refresh_token","token_identifier_alg":"hash_base64_sha512_sha512","token":"AbC+/=="}}"#,
                SecurityEvent(
                    type: .tokenRevoked, rawType: Self.oauth + "token-revoked", subject: nil,
                    revokedToken: RevokedToken(
                        tokenType: "refresh_token", identifierAlgorithm: "hash_base64_sha512_sha512",
                        identifier: "AbC+/=="))
            ),
            (
                Self.risc + "some-new-kind", subject,
                SecurityEvent(type: .unknown, rawType: Self.risc + "some-new-kind", subject: Self.sub)
            ),
            (
                "urn:example:no-subject", "{}",
                SecurityEvent(type: .unknown, rawType: "urn:example:no-subject", subject: nil)
            ),
        ]
        for (uri, payload, expected) in cases {
            let set = try Self.verify(claims: Self.claims(events: Self.events(uri, payload)))
            #expect(set.events == [expected], "\(uri)")
        }
    }

    @Test("account-disabled ends sessions only for hijacking")
    func disabledEndsSessionsOnlyForHijacking() {
        let uri = Self.risc + "account-disabled"
        #expect(SecurityEvent(type: .accountDisabled, rawType: uri, subject: "1", reason: "hijacking").endsSessions)
        #expect(!SecurityEvent(type: .accountDisabled, rawType: uri, subject: "1", reason: "bulk-account").endsSessions)
        #expect(!SecurityEvent(type: .accountDisabled, rawType: uri, subject: "1").endsSessions)
        #expect(!SecurityEvent(type: .accountEnabled, rawType: uri, subject: "1").endsSessions)
    }

    @Test("format (RISC 1.0) is read like subject_type; id_token_claims gives the sub and never the email")
    func subjectSpellings() throws {
        let format = #"{"subject":{"format":"iss-sub","iss":"https://accounts.google.com/","sub":"42"}}"#
        #expect(
            try Self.verify(claims: Self.claims(events: Self.events(Self.risc + "sessions-revoked", format))).events[0]
                .subject == "42")
        let claims =
            #"{"subject":{"subject_type":"id_token_claims","iss":"https://accounts.google.com","sub":"43","email":"someone@example.com"}}"#
        let event = try Self.verify(claims: Self.claims(events: Self.events(Self.risc + "sessions-revoked", claims)))
            .events[0]
        #expect(event.subject == "43")
        #expect(!"\(event)".contains("example.com"))
    }

    @Test("aud as an array: every configured client ID it names, once, in its order; others ignored")
    func audienceArray() throws {
        let aud =
            "[\"other.apps.googleusercontent.com\",\"\(Self.otherClientID)\",\"\(Self.clientID)\",\"\(Self.otherClientID)\"]"
        #expect(try Self.verify(claims: Self.claims(aud: aud)).clientIDs == [Self.otherClientID, Self.clientID])
    }

    @Test("typ absent, secevent+jwt, application/secevent+jwt or JWT are accepted")
    func acceptedTypes() throws {
        for typ in [nil, "secevent+jwt", "application/secevent+jwt", "JWT"] {
            #expect(try Self.verify(typ: typ).tokenID == "set-jti-1", "\(typ ?? "none")")
        }
    }

    @Test("no exp check: an old token with an exp long past is accepted (Google's do not expire)")
    func noExpiry() throws {
        let old = Self.claims(iat: "\(Self.now - 400 * 86_400)", extra: #""exp":\#(Self.now - 300 * 86_400)"#)
        #expect(try Self.verify(claims: old).issuedAt == Self.now - 400 * 86_400)
    }

    @Test("two events in one token: both, sorted by URI")
    func severalEvents() throws {
        let subject = #"{"subject":{"subject_type":"iss-sub","iss":"https://accounts.google.com/","sub":"9"}}"#
        let events = "{\"\(Self.risc)sessions-revoked\":\(subject),\"\(Self.risc)account-enabled\":\(subject)}"
        #expect(
            try Self.verify(claims: Self.claims(events: events)).events.map(\.type) == [
                .accountEnabled, .sessionsRevoked,
            ])
    }

    /// Each refusal: its named code and the RFC 8935 code it is answered with.
    static let refusals: [(String, String, VerificationError.Code, String)] = [
        ("no iss", claims(iss: nil), .issMissing, "invalid_issuer"),
        (
            "iss without the trailing slash", claims(iss: #""https://accounts.google.com""#), .issMismatch,
            "invalid_issuer"
        ),
        ("Apple's iss", claims(iss: #""https://appleid.apple.com""#), .issMismatch, "invalid_issuer"),
        ("no aud", claims(aud: nil), .audMissing, "invalid_audience"),
        ("aud a number", claims(aud: "7"), .audInvalid, "invalid_audience"),
        ("aud another app", claims(aud: #""other.apps.googleusercontent.com""#), .audNotServed, "invalid_audience"),
        ("aud empty array", claims(aud: "[]"), .audInvalid, "invalid_audience"),
        ("no iat", claims(iat: nil), .iatMissing, "invalid_request"),
        ("iat a string", claims(iat: #""1""#), .iatInvalid, "invalid_request"),
        ("iat beyond the leeway", claims(iat: "\(now + 61)"), .iatInFuture, "invalid_request"),
        ("no jti", claims(jti: nil), .jtiMissing, "invalid_request"),
        ("jti empty", claims(jti: #""""#), .jtiInvalid, "invalid_request"),
        ("no events", claims(events: nil), .eventsMissing, "invalid_request"),
        ("events a string", claims(events: #""{}""#), .eventsWrongType, "invalid_request"),
        ("events empty", claims(events: "{}"), .eventsEmpty, "invalid_request"),
        (
            "seventeen events",
            claims(events: "{" + (1...17).map { "\"urn:e:\($0)\":{}" }.joined(separator: ",") + "}"), .eventsTooMany,
            "invalid_request"
        ),
        (
            "payload not an object", claims(events: events(risc + "sessions-revoked", "[]")), .eventPayloadNotObject,
            "invalid_request"
        ),
        ("no subject", claims(events: events(risc + "sessions-revoked", "{}")), .subjectMissing, "invalid_request"),
        (
            "subject without sub",
            claims(events: events(risc + "sessions-revoked", #"{"subject":{"subject_type":"iss-sub","iss":"x"}}"#)),
            .subjectInvalid, "invalid_request"
        ),
        (
            "subject without format",
            claims(events: events(risc + "account-enabled", #"{"subject":{"iss":"x","sub":"1"}}"#)), .subjectInvalid,
            "invalid_request"
        ),
        (
            "sub with a brace",
            claims(
                events: events(
                    risc + "sessions-revoked", #"{"subject":{"subject_type":"iss-sub","iss":"x","sub":"1}2"}}"#)),
            .subjectInvalid, "invalid_request"
        ),
        (
            "email subject for sessions-revoked",
            claims(
                events: events(
                    risc + "sessions-revoked", #"{"subject":{"subject_type":"email","email":"a@b.example"}}"#)),
            .subjectFormatNotAccepted, "invalid_request"
        ),
        (
            "subject_type and format disagree",
            claims(
                events: events(
                    risc + "sessions-revoked",
                    #"{"subject":{"subject_type":"iss-sub","format":"email","iss":"x","sub":"1"}}"#)),
            .subjectFormatNotAccepted, "invalid_request"
        ),
        (
            "token-revoked with an account subject",
            claims(
                events: events(oauth + "token-revoked", #"{"subject":{"subject_type":"iss-sub","iss":"x","sub":"1"}}"#)),
            .subjectFormatNotAccepted, "invalid_request"
        ),
        (
            "token-revoked without token",
            claims(
                events: events(
                    oauth + "token-revoked",
                    #"{"subject":{"subject_type":"oauth_token","token_type":"refresh_token","token_identifier_alg":"prefix"}}"#
                )),
            .subjectInvalid, "invalid_request"
        ),
        (
            "reason not a string",
            claims(
                events: events(
                    risc + "account-disabled", #"{"subject":{"subject_type":"iss-sub","iss":"x","sub":"1"},"reason":1}"#
                )),
            .eventMemberInvalid, "invalid_request"
        ),
        (
            "state with a newline", claims(events: events(risc + "verification", #"{"state":"a\nb"}"#)),
            .eventMemberInvalid, "invalid_request"
        ),
        ("claims not JSON", "not json", .claimsNotJSON, "invalid_request"),
        ("duplicate member", claims(extra: #""jti":"again""#), .claimsDuplicateMember, "invalid_request"),
    ]

    @Test("each bad SET is refused with its own code and its RFC 8935 code")
    func refusalsByCause() {
        for (name, claims, code, err) in Self.refusals {
            let refusal = Self.refusal(claims)
            #expect(refusal?.code == code, "\(name)")
            #expect(refusal?.securityEventErrorCode == err, "\(name)")
        }
    }

    @Test("the same bad claims signed by another key under our kid: authentication_failed every time")
    func forgedBeforeClaims() {
        let forger = try! TestSigningKey.generate(keyID: Fixtures.primary.keyID)
        for (name, claims, _, _) in Self.refusals {
            let refusal = Self.refusal(claims, key: forger)
            #expect(refusal?.code == .signatureInvalid, "\(name)")
            #expect(refusal?.securityEventErrorCode == "authentication_failed", "\(name)")
        }
    }

    @Test("header refusals: typ, alg, kid")
    func headerRefusals() {
        #expect(Self.refusal(Self.claims(), typ: "at+jwt")?.code == .typNotAllowed)
        #expect(Self.refusal(Self.claims(), typ: "at+jwt")?.securityEventErrorCode == "invalid_request")
        #expect(Self.refusal(Self.claims(), key: Fixtures.attacker)?.code == .kidUnknown)
        #expect(Self.refusal(Self.claims(), key: Fixtures.attacker)?.securityEventErrorCode == "invalid_key")

        let hs256 =
            Base64URL.encode(#"{"alg":"HS256","kid":"test-apple-key-1"}"#.utf8) + "."
            + Base64URL.encode(Self.claims().utf8) + ".c2ln"
        let refusal = Self.refuse(token: hs256)
        #expect(refusal?.code == .algNotAllowed)
        #expect(refusal?.securityEventErrorCode == "authentication_failed")

        let noKid = Base64URL.encode(#"{"alg":"RS256"}"#.utf8) + "." + Base64URL.encode(Self.claims().utf8) + ".c2ln"
        #expect(Self.refuse(token: noKid)?.securityEventErrorCode == "invalid_key")
        #expect(Self.refuse(token: "a.b")?.securityEventErrorCode == "invalid_request")
        #expect(Self.refuse(token: "")?.code == .tokenSegmentCount)
        // Apple's wrapper is not a SET: the body is the token itself.
        #expect(Self.refuse(token: #"{"payload":"a.b.c"}"#)?.securityEventErrorCode == "invalid_request")
    }

    static func refuse(token: String) -> VerificationError? {
        do {
            _ = try verifier.verify(token: Array(token.utf8), keys: Fixtures.keys, issuer: issuer, now: now)
            return nil
        } catch { return error }
    }

    @Test("a token over the size limit is refused before it is parsed")
    func tooLarge() {
        let small = SecurityEventVerifier(clientIDs: [Self.clientID], maximumTokenBytes: 100)
        let token = try! TestSecurityEvent.signed(claims: Self.claims(), key: Fixtures.primary)
        #expect(throws: VerificationError(.bodyTooLarge, "")) {
            try small.verify(token: Array(token.utf8), keys: Fixtures.keys, issuer: Self.issuer, now: Self.now)
        }
    }

    @Test("no issuer loaded yet: keys_unavailable, which has no RFC 8935 code (a 503)")
    func noIssuerYet() {
        let token = try! TestSecurityEvent.signed(claims: Self.claims(), key: Fixtures.primary)
        do {
            _ = try Self.verifier.verify(token: Array(token.utf8), keys: FixedSource(), issuer: nil, now: Self.now)
            Issue.record("accepted without an issuer")
        } catch {
            #expect(error.code == .keysUnavailable)
            #expect(error.securityEventErrorCode == nil)
        }
    }

    @Test("an unknown kid after a refresh that brought keys: kid_unknown (invalid_key); without one: keys_unavailable")
    func unknownKidRule() {
        let token = try! TestSecurityEvent.signed(claims: Self.claims(), key: Fixtures.attacker)
        for (refreshes, code) in [(true, VerificationError.Code.kidUnknown), (false, .keysUnavailable)] {
            do {
                _ = try Self.verifier.verify(
                    token: Array(token.utf8), keys: FixedSource(refreshes: refreshes), issuer: Self.issuer,
                    now: Self.now)
                Issue.record("accepted")
            } catch { #expect(error.code == code) }
        }
    }

    struct FixedSource: SigningKeySource {
        var refreshes = true
        func key(forKeyID kid: String) throws(VerificationError) -> RSAPublicKey {
            try Fixtures.keys.key(forKeyID: kid)
        }
        func refreshForUnknownKey() -> Bool { refreshes }
    }

    @Test("an event-type URI is matched byte for byte")
    func typeMatching() {
        #expect(SecurityEventType(rawType: Self.risc + "sessions-revoked") == .sessionsRevoked)
        #expect(SecurityEventType(rawType: Self.oauth + "sessions-revoked") == .unknown)
        #expect(SecurityEventType(rawType: Self.risc + "tokens-revoked") == .unknown)
        #expect(SecurityEventType(rawType: "sessions-revoked") == .unknown)
        for type in SecurityEventType.allCases where type != .unknown {
            #expect(SecurityEventType(rawType: type.uri) == type)
        }
    }
}
