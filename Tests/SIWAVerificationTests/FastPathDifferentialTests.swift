import Foundation
import SIWACrypto
import SIWATestKit
import SIWAVerification
import Testing

/// The verification fast path (the plain-JSON reader) against the strict steps it stands
/// beside: for every input, the same verified value, or the same refusal with the same code,
/// message and times. Inputs: the fuzz seed corpus, the hostile-input cases, unusual
/// spellings picked by hand, and bounded, seeded random mutations of real notifications and
/// Security Event Tokens (claims, bodies, tokens and headers).
@Suite("Fast path against the strict steps")
struct FastPathDifferentialTests {
    static let apple = Fixtures.verifier
    static let google = SecurityEventVerifierTests.verifier
    static let googleIssuer = SecurityEventVerifierTests.issuer
    static let now = Fixtures.now

    /// One answer, written out whole: the value, or the refusal's code, message and times.
    static func answer<Value>(_ run: () throws(VerificationError) -> Value) -> String {
        do {
            return "accepted \(try run())"
        } catch {
            return
                "refused \(error.code.rawValue): \(error.message) (iat \(String(describing: error.issuedAt)), now \(String(describing: error.serverTime)))"
        }
    }

    /// Fast and strict answers for an Apple body; records a difference. Returns whether it verified.
    @discardableResult
    static func compareAppleBody(
        _ body: [UInt8], _ label: String, verifier: NotificationVerifier = apple, now: Int64 = now
    )
        -> Bool
    {
        let fast = answer { () throws(VerificationError) in try verifier.verify(body: body, now: now) }
        let strict = answer { () throws(VerificationError) in try verifier.verifyStrictly(body: body, now: now) }
        #expect(fast == strict, "\(label): \(String(decoding: body, as: UTF8.self))")
        return strict.hasPrefix("accepted")
    }

    @discardableResult
    static func compareAppleClaims(
        _ claims: [UInt8], _ label: String, verifier: NotificationVerifier = apple, now: Int64 = now
    )
        -> Bool
    {
        let fast = answer { () throws(VerificationError) in try verifier.interpret(claims: claims, now: now) }
        let strict = answer { () throws(VerificationError) in try verifier.interpretStrictly(claims: claims, now: now) }
        #expect(fast == strict, "\(label): \(String(decoding: claims, as: UTF8.self))")
        return strict.hasPrefix("accepted")
    }

    @discardableResult
    static func compareGoogleToken(_ token: [UInt8], _ label: String) -> Bool {
        let fast = answer { () throws(VerificationError) in
            try google.verify(token: token, keys: Fixtures.keys, issuer: googleIssuer, now: now)
        }
        let strict = answer { () throws(VerificationError) in
            try google.verifyStrictly(token: token, keys: Fixtures.keys, issuer: googleIssuer, now: now)
        }
        #expect(fast == strict, "\(label): \(String(decoding: token, as: UTF8.self))")
        return strict.hasPrefix("accepted")
    }

    @discardableResult
    static func compareGoogleClaims(_ claims: [UInt8], _ label: String) -> Bool {
        let fast = answer { () throws(VerificationError) in
            try google.interpret(claims: claims, issuer: googleIssuer, now: now)
        }
        let strict = answer { () throws(VerificationError) in
            try google.interpretStrictly(claims: claims, issuer: googleIssuer, now: now)
        }
        #expect(fast == strict, "\(label): \(String(decoding: claims, as: UTF8.self))")
        return strict.hasPrefix("accepted")
    }

    // MARK: What is sent takes the fast path

    static let emailClaims = Fixtures.claims(
        events: Fixtures.eventsString(
            Fixtures.event(
                type: #""email-disabled""#, extra: #""email":"\#(Fixtures.relayEmail)","is_private_email":"true""#)))
    static let documentedClaims = Fixtures.claims(
        exp: nil,
        events: Fixtures.event(
            type: #""email-enabled""#, eventTime: "\(now - 86_400)",
            extra: #""email":"someone@example.com","is_private_email":true"#))
    static let appleClaims = [Fixtures.claims(), emailClaims, documentedClaims]

    static func googleClaims(_ events: String, aud: String = "\"\(SecurityEventVerifierTests.clientID)\"") -> String {
        SecurityEventVerifierTests.claims(aud: aud, events: events)
    }
    static let risc = SecurityEventVerifierTests.risc
    static let oauth = SecurityEventVerifierTests.oauth
    static let accountSubject =
        #"{"subject":{"subject_type":"iss-sub","iss":"https://accounts.google.com/","sub":"7375626A656374"}}"#
    static let googleClaimsSent = [
        SecurityEventVerifierTests.claims(),
        googleClaims(SecurityEventVerifierTests.events(oauth + "tokens-revoked", accountSubject)),
        googleClaims(
            SecurityEventVerifierTests.events(
                risc + "account-disabled",
                #"{"subject":{"format":"id_token_claims","iss":"https://accounts.google.com/","sub":"42"},"reason":"hijacking"}"#
            )),
        googleClaims(
            SecurityEventVerifierTests.events(risc + "account-enabled", accountSubject),
            aud: "[\"\(SecurityEventVerifierTests.otherClientID)\",\"\(SecurityEventVerifierTests.clientID)\"]"),
        googleClaims(SecurityEventVerifierTests.events(risc + "account-credential-change-required", accountSubject)),
        googleClaims(SecurityEventVerifierTests.events(risc + "verification", #"{"state":"abc-123"}"#)),
    ]

    @Test("what Apple and Google send is read by the fast path, and verifies to what the strict steps give")
    func sentTokensTakeTheFastPath() throws {
        for claims in Self.appleClaims {
            let body = Fixtures.body(claims: claims)
            #expect(Self.apple.fastPathReads(body: body, now: Self.now), "\(claims)")
            #expect(Self.compareAppleBody(body, "sent"), "\(claims)")
        }
        for claims in Self.googleClaimsSent {
            let token = Array(try TestSecurityEvent.signed(claims: claims, key: Fixtures.primary).utf8)
            #expect(Self.google.fastPathReads(token: token, issuer: Self.googleIssuer, now: Self.now), "\(claims)")
            #expect(Self.compareGoogleToken(token, "sent"), "\(claims)")
        }
    }

    // MARK: The seed corpus and the hostile cases

    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/corpus")

    @Test("every body and claims seed of the fuzz corpus gets the same answer")
    func seedCorpus() throws {
        let verifier = NotificationVerifier(
            keys: try JSONWebKeySet(jsonBytes: Array(FuzzFixture.jwksDocument.utf8)), clientIDs: [FuzzFixture.clientID])
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.corpus.path).sorted()
        var compared = 0
        for name in names {
            let bytes = [UInt8](try Data(contentsOf: Self.corpus.appendingPathComponent(name)))
            if bytes.first == 0 {
                Self.compareAppleClaims(Array(bytes.dropFirst()), name, verifier: verifier, now: FuzzFixture.now)
                compared += 1
            } else if bytes.first == UInt8(ascii: "{") {
                Self.compareAppleBody(bytes, name, verifier: verifier, now: FuzzFixture.now)
                compared += 1
            }
        }
        #expect(compared >= 10, "the corpus is at \(Self.corpus.path)")
    }

    @Test("every hostile-input case and every SET refusal gets the same answer")
    func hostileCases() throws {
        let cases =
            HostileInputTests.bodyCases + HostileInputTests.compactCases + HostileInputTests.headerCases
            + HostileInputTests.signatureCases + HostileInputTests.claimsCases + HostileInputTests.eventCases
        for hostile in cases { Self.compareAppleBody(hostile.body(), hostile.name) }
        for (name, claims, _, _) in SecurityEventVerifierTests.refusals {
            Self.compareGoogleClaims(Array(claims.utf8), name)
            Self.compareGoogleToken(
                Array(try TestSecurityEvent.signed(claims: claims, key: Fixtures.primary).utf8), name)
        }
    }

    // MARK: Unusual spellings

    /// Claims the fast path must hand over (or read exactly as the strict parser does).
    static let unusualAppleClaims: [String] = [
        // A duplicate spelt with an escape, and escapes where the fast path reads bytes.
        Fixtures.claims(extra: #""i\u0073s":"https://appleid.apple.com""#),
        Fixtures.claims(extra: #""jti":"again""#),
        Fixtures.claims(iss: #""https:\/\/appleid.apple.com""#),
        Fixtures.claims(aud: #""com.example.\u0061pp""#),
        Fixtures.claims(aud: #"["com.example.other","com.example.app"]"#),
        Fixtures.claims(aud: #"["com.example.other",7]"#),
        Fixtures.claims(aud: "[]"),
        Fixtures.claims(jti: #""\u00e9t\u00e9""#),
        Fixtures.claims(jti: "\"caf\u{E9}\""),
        Fixtures.claims(jti: #""\ud800""#),
        Fixtures.claims(jti: "\"a\u{7F}b\""),
        Fixtures.claims(jti: "\"\(String(repeating: "j", count: 257))\""),
        Fixtures.claims(iat: "\(now - 100).0"),
        Fixtures.claims(iat: "\(now - 100)e0"),
        Fixtures.claims(iat: "-0"),
        Fixtures.claims(exp: "-1"),
        Fixtures.claims(exp: "1234567890123456789"),
        Fixtures.claims(exp: "12345678901234567890123"),
        Fixtures.claims(exp: "0\(now)"),
        Fixtures.claims(extra: #""nbf":\#(now + 1000)"#),
        Fixtures.claims(extra: #""deep":[[[[[[[[[[1]]]]]]]]]]"#),
        Fixtures.claims(extra: #""x":{"y":{"z":{}}}"#),
        Fixtures.claims(extra: (1...17).map { "\"m\($0)\":\($0)" }.joined(separator: ",")),
        " \t\r\n" + Fixtures.claims() + " \n",
        Fixtures.claims() + "x",
        Fixtures.claims() + "{}",
        "\u{FEFF}" + Fixtures.claims(),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(type: #""consent\u002drevoked""#))),
        Fixtures.claims(events: #""{\u0022type\u0022:\u0022consent-revoked\u0022}""#),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(extra: #""type":"x""#))),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(sub: #""a b""#))),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(sub: #""a{b""#))),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(eventTime: "1.5"))),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(eventTime: "99999999999"))),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(eventTime: "\((now + 1000) * 1000)"))),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(type: #""email-enabled""#))),
        Fixtures.claims(
            events: Fixtures.eventsString(
                Fixtures.event(type: #""email-enabled""#, extra: #""email":"caf\u00e9@example.com""#))),
        Fixtures.claims(
            events: Fixtures.eventsString(
                Fixtures.event(type: #""email-enabled""#, extra: #""email":"a@b","is_private_email":"yes""#))),
        Fixtures.claims(
            events: Fixtures.eventsString(
                Fixtures.event(type: #""email-enabled""#, extra: #""email":"a@b","is_private_email":null"#))),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event() + " ")),
        Fixtures.claims(events: Fixtures.eventsString(Fixtures.event() + "]")),
        Fixtures.claims(events: #""{\"type\":\"consent-revoked\"\n}""#),
        Fixtures.claims(events: "7"),
    ]

    static let unusualGoogleClaims: [String] = [
        SecurityEventVerifierTests.claims(iss: #""https:\/\/accounts.google.com\/""#),
        SecurityEventVerifierTests.claims(extra: #""j\u0074i":"x""#),
        googleClaims(SecurityEventVerifierTests.events(oauth + "token-revoked", accountSubject)),
        googleClaims(SecurityEventVerifierTests.events(risc + "new-kind", accountSubject)),
        googleClaims(
            SecurityEventVerifierTests.events(
                risc + "account-disabled", #"{"subject":{"subject_type":"iss-sub","iss":"x","sub":"1"},"reason":""}"#)),
        googleClaims(
            SecurityEventVerifierTests.events(
                risc + "sessions-revoked",
                #"{"subject":{"subject_type":"iss-sub","format":"iss-sub","iss":"x","sub":"1"}}"#)),
        googleClaims(
            SecurityEventVerifierTests.events(
                risc + "sessions-revoked", #"{"subject":{"subject_type":"iss\u002dsub","iss":"x","sub":"1"}}"#)),
        googleClaims(
            "{\"\(risc)account-enabled\":\(accountSubject),\"\(risc)sessions-revoked\":\(accountSubject)}"),
        googleClaims(
            "{\"\(risc)sessions-revoked\":\(accountSubject),\"\(risc)sessions-revoked\":\(accountSubject)}"),
        googleClaims(
            SecurityEventVerifierTests.events(risc + "sessions-revoked", accountSubject),
            aud: "[\"\(SecurityEventVerifierTests.clientID)\",\"\(SecurityEventVerifierTests.clientID)\"]"),
    ]

    @Test("unusual spellings (escapes, non-ASCII, numbers, depth, duplicates) get the same answer")
    func unusualSpellings() throws {
        for claims in Self.unusualAppleClaims {
            Self.compareAppleClaims(Array(claims.utf8), "Apple claims")
            Self.compareAppleBody(Fixtures.body(claims: claims), "Apple body")
        }
        for claims in Self.unusualGoogleClaims {
            Self.compareGoogleClaims(Array(claims.utf8), "Google claims")
        }
        let token = Fixtures.token()
        let bodies = [
            #"{"payload":"\#(token)","other":1}"#, #" { "payload" : "\#(token)" } "#,
            #"{"payload":"\#(token.replacingOccurrences(of: ".", with: "\\u002e"))"}"#,
            #"{"p\u0061yload":"\#(token)"}"#, #"{"payload":"\#(token)","payload":"\#(token)"}"#,
            #"{"payload":"\#(token)"}x"#, #"{"payload":"\#(token).x"}"#, #"{"payload":"\#(token)="}"#,
        ]
        for body in bodies { Self.compareAppleBody(Array(body.utf8), "body") }
        let segments = Fixtures.segments(token)
        let headers = [
            #"{"alg":"RS256","kid":"\#(Fixtures.primary.keyID)","typ":7}"#,
            #"{"alg":"RS\u0032\u0035\u0036","kid":"\#(Fixtures.primary.keyID)"}"#,
            #"{"alg":"RS256","kid":"\#(Fixtures.primary.keyID)","crit":[]}"#,
            #"{"alg":"RS256","kid":"","x":1}"#, #"{"alg":"RS256","kid":"\#(String(repeating: "k", count: 257))"}"#,
            #"{"alg":"RS256","kid":"\#(Fixtures.primary.keyID)","alg":"none"}"#,
        ]
        for header in headers {
            let changed = [Fixtures.b64(header), segments[1], segments[2]].joined(separator: ".")
            Self.compareAppleBody(Fixtures.body(token: changed), "header \(header)")
            Self.compareGoogleToken(Array(changed.utf8), "header \(header)")
        }
        for typ in ["SecEvent+JWT", "application/secevent+jwt", "jwt", "JOSE", "", "application\\/secevent+jwt"] {
            let header = #"{"alg":"RS256","kid":"\#(Fixtures.primary.keyID)","typ":"\#(typ)"}"#
            let claims = SecurityEventVerifierTests.claims()
            let signed = try CompactJWSSigner.signRS256(
                header: header, claims: claims, key: Fixtures.primary.privateKey)
            Self.compareGoogleToken(Array(signed.utf8), "typ \(typ)")
        }
    }

    // MARK: Random mutations

    /// SplitMix64: the same mutations on every run, so a failure can be replayed.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Bytes that change how JSON reads: structure, escapes, digits, controls, DEL, non-ASCII.
    static let interestingBytes: [UInt8] =
        Array(#"{}[]:,"\ u0-.eE19aftn/"#.utf8) + [0x00, 0x09, 0x1F, 0x7F, 0x80, 0xC3, 0xE9, 0xFF]

    /// One to three edits: replace, insert or delete a byte, repeat a member (from a comma
    /// to the next comma or brace, so a name comes twice), or spell a letter as `\u00XX`.
    static func mutate(_ original: [UInt8], using generator: inout SeededGenerator) -> [UInt8] {
        var bytes = original
        for _ in 0..<Int.random(in: 1...3, using: &generator) where !bytes.isEmpty {
            let at = Int.random(in: 0..<bytes.count, using: &generator)
            switch Int.random(in: 0..<5, using: &generator) {
            case 0: bytes[at] = interestingBytes.randomElement(using: &generator)!
            case 1: bytes.insert(interestingBytes.randomElement(using: &generator)!, at: at)
            case 2: bytes.remove(at: at)
            case 3:
                guard let comma = bytes[at...].firstIndex(of: UInt8(ascii: ",")),
                    let end = bytes[(comma + 1)...].firstIndex(where: {
                        $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "}")
                    })
                else { continue }
                bytes.insert(contentsOf: Array(bytes[comma..<end]), at: end)
            default:
                guard
                    let letter = bytes[at...].firstIndex(where: { $0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z") })
                else { continue }
                let hex = Array(String(bytes[letter], radix: 16).utf8)
                bytes.replaceSubrange(letter...letter, with: Array(#"\u00"#.utf8) + hex)
            }
        }
        return bytes
    }

    static let mutationsPerSeed = 400

    @Test("seeded random mutations of real claims get the same answer, some of them accepted")
    func mutatedClaims() {
        var generator = SeededGenerator(state: 37)
        var accepted = 0
        for claims in Self.appleClaims {
            let original = Array(claims.utf8)
            for round in 0..<Self.mutationsPerSeed {
                if Self.compareAppleClaims(Self.mutate(original, using: &generator), "Apple mutation \(round)") {
                    accepted += 1
                }
            }
        }
        for claims in Self.googleClaimsSent {
            let original = Array(claims.utf8)
            for round in 0..<Self.mutationsPerSeed {
                if Self.compareGoogleClaims(Self.mutate(original, using: &generator), "Google mutation \(round)") {
                    accepted += 1
                }
            }
        }
        // Whitespace, a repeated member's value and the like keep some valid: both paths
        // accept those, so the comparison covers accepted values, not only refusals.
        #expect(accepted >= 50)
    }

    @Test("seeded random mutations of real bodies, tokens and headers get the same answer")
    func mutatedBodiesAndHeaders() throws {
        var generator = SeededGenerator(state: 3_700)
        let body = Fixtures.body(claims: Self.emailClaims)
        let segments = Fixtures.segments(Fixtures.token(claims: Self.emailClaims))
        let googleToken = Array(
            try TestSecurityEvent.signed(claims: SecurityEventVerifierTests.claims(), key: Fixtures.primary).utf8)
        let googleSegments = Fixtures.segments(String(decoding: googleToken, as: UTF8.self))
        for round in 0..<Self.mutationsPerSeed {
            Self.compareAppleBody(Self.mutate(body, using: &generator), "body mutation \(round)")
            Self.compareGoogleToken(Self.mutate(googleToken, using: &generator), "token mutation \(round)")
            let header = Self.mutate(Array(Fixtures.header().utf8), using: &generator)
            let token = [Base64URL.encode(header), segments[1], segments[2]].joined(separator: ".")
            Self.compareAppleBody(Fixtures.body(token: token), "header mutation \(round)")
            let googleHeader = Self.mutate(
                Array(#"{"alg":"RS256","kid":"\#(Fixtures.primary.keyID)","typ":"secevent+jwt"}"#.utf8),
                using: &generator)
            let changed = [Base64URL.encode(googleHeader), googleSegments[1], googleSegments[2]].joined(separator: ".")
            Self.compareGoogleToken(Array(changed.utf8), "SET header mutation \(round)")
        }
    }
}
