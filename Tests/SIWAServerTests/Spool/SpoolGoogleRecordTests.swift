import Foundation
import SIWAVerification
import Testing

@testable import SIWASpool

/// The spool's record for Google's Security Event Tokens: one framing beside Apple's, told
/// apart by `provider`, with every record written before it still read as Apple's.
@Suite("Spool records: Google's Security Event Tokens beside Apple's notifications")
struct SpoolGoogleRecordTests {
    static let revocation = VerifiedSecurityEvent(
        clientIDs: ["123-web.apps.googleusercontent.com", "123-ios.apps.googleusercontent.com"],
        tokenID: "jti-\"quote\\slash\nline", issuedAt: 1_700_000_000,
        events: [
            SecurityEvent(
                type: .accountDisabled, rawType: SecurityEventType.accountDisabled.uri, subject: "1122334455",
                reason: "hijacking"),
            SecurityEvent(
                type: .tokenRevoked, rawType: SecurityEventType.tokenRevoked.uri, subject: nil,
                revokedToken: RevokedToken(
                    tokenType: "refresh_token", identifierAlgorithm: "prefix", identifier: "1/abc")),
            SecurityEvent(type: .verification, rawType: SecurityEventType.verification.uri, subject: nil, state: "s1"),
            SecurityEvent(type: .unknown, rawType: "https://example.com/new-type", subject: "99"),
        ])

    @Test("a Google record reads back as the same token, with its spool and attempt times")
    func googleRecordRoundTrips() throws {
        let line = SpoolRecord.encode(Self.revocation, spooledAt: 1_700_000_001_000, attemptedAt: 1_700_000_000_500)
        guard case .securityEvent(let decoded, let spooledAt, let attemptedAt) = SpoolRecord.decode(line.dropLast())
        else {
            Issue.record("not read as Google's record")
            return
        }
        #expect(decoded == Self.revocation)
        #expect(spooledAt == 1_700_000_001_000)
        #expect(attemptedAt == 1_700_000_000_500)
        #expect(line.last == 0x0A)
        #expect(line.dropLast().contains(0x0A) == false)
    }

    /// What a release before Google's records wrote (no `provider`, every field Apple's):
    /// still Apple's notification.
    @Test("a record written before Google's kind existed reads as Apple's notification")
    func earlierAppleRecordReadsAsApple() throws {
        let json = Array(
            (#"{"v":1,"aud":"com.example.app","sub":"000123.abc","type":"consent-revoked","#
                + #""raw_type":"consent-revoked","event_time_ms":1670016125295,"jti":"t1","iat":1670016000,"#
                + #""exp":null,"email":null,"is_private_email":null}"#).utf8)
        let line = Array("\(json.count) \(CRC32.hex(CRC32.checksum(json))) ".utf8) + json
        guard case .notification(let notification, let spooledAt, let attemptedAt) = SpoolRecord.decode(line[...])
        else {
            Issue.record("an earlier Apple record is not read as Apple's")
            return
        }
        #expect(notification.clientID == "com.example.app")
        #expect(notification.subject == "000123.abc")
        #expect(notification.type == .consentRevoked)
        #expect(notification.tokenID == "t1")
        #expect(spooledAt == nil && attemptedAt == nil)
    }

    @Test("a provider this release does not know is malformed, not anyone's record")
    func unknownProviderIsMalformed() throws {
        let google = String(decoding: SpoolRecord.encode(Self.revocation).dropLast(), as: UTF8.self)
        let json = Array(
            google[google.firstIndex(of: "{")!...].replacingOccurrences(of: "\"google\"", with: "\"other\"").utf8)
        let line = Array("\(json.count) \(CRC32.hex(CRC32.checksum(json))) ".utf8) + json
        guard case .bad(let reason) = SpoolRecord.decode(line[...]) else {
            Issue.record("a record of an unknown provider was read")
            return
        }
        #expect(reason == .malformed)
    }
}
