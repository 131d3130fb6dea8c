import SIWATestKit
import SIWAVerification
import Testing

/// "Nothing in the claims is read before the signature checks out": a forged token
/// (signed by a key not in the JWKS, under Apple's kid) whose claims are bad as well is
/// answered `signature_invalid`, never with the code its claims would earn. If the claims
/// were read first, each of these would come back with its claims code instead.
@Suite("Forged tokens with bad claims")
struct ForgedClaimsTests {
    /// Claims that, signed genuinely, are refused with the given code (checked below, so
    /// each case really is bad in the way it says).
    static let badClaims: [(String, String, VerificationError.Code)] = [
        ("claims not JSON", "not json at all", .claimsNotJSON),
        ("claims an array", "[1,2,3]", .claimsNotObject),
        ("duplicate member", Fixtures.claims(extra: #""iss":"https://appleid.apple.com""#), .claimsDuplicateMember),
        ("wrong issuer", Fixtures.claims(iss: #""https://evil.example""#), .issMismatch),
        ("no issuer", Fixtures.claims(iss: nil), .issMissing),
        ("another app", Fixtures.claims(aud: #""com.other.app""#), .audNotServed),
        ("no audience", Fixtures.claims(aud: nil), .audMissing),
        ("expired", Fixtures.claims(exp: "\(Fixtures.now - 3600)", iat: "\(Fixtures.now - 90_000)"), .tokenExpired),
        ("issued in the future", Fixtures.claims(iat: "\(Fixtures.now + 3600)"), .iatInFuture),
        ("no iat", Fixtures.claims(iat: nil), .iatMissing),
        ("no jti", Fixtures.claims(jti: nil), .jtiMissing),
        ("no events", Fixtures.claims(events: nil), .eventsMissing),
        ("events an array", Fixtures.claims(events: "[]"), .eventsWrongType),
        (
            "event without sub", Fixtures.claims(events: Fixtures.eventsString(Fixtures.event(sub: nil))),
            .eventSubMissing
        ),
    ]

    @Test("each bad claims set is refused with its own code when genuinely signed")
    func genuineTokensGetTheirClaimsCode() {
        for (name, claims, code) in Self.badClaims {
            #expect(Fixtures.refusal(Fixtures.body(claims: claims))?.code == code, "\(name)")
        }
    }

    @Test("the same claims signed by an attacker under Apple's kid: signature_invalid, every time")
    func forgedTokensAreSignatureInvalid() {
        let forger = try! TestSigningKey.generate(keyID: Fixtures.primary.keyID)
        for (name, claims, _) in Self.badClaims {
            let refusal = Fixtures.refusal(Fixtures.body(claims: claims, key: forger))
            #expect(refusal?.code == .signatureInvalid, "\(name)")
            #expect(refusal?.failureClass == .notAuthentic, "\(name)")
        }
    }

    @Test("genuine claims with one byte changed after signing: signature_invalid, not a claims code")
    func tamperedClaims() {
        let segments = Fixtures.segments(Fixtures.token())
        // Claims that would be "another app" (403) had they been read.
        let swapped = Fixtures.b64(Fixtures.claims(aud: #""com.other.app""#))
        let token = [segments[0], swapped, segments[2]].joined(separator: ".")
        #expect(Fixtures.refusal(Fixtures.body(token: token))?.code == .signatureInvalid)
    }
}
