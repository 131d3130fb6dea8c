import Foundation
import SIWARedis
import SIWAStore
import SIWAVerification
import Testing

/// Google's part of the contract, checked field by field against a real redis-server: every
/// event type's effect, ordering by `iat`, de-duplication by `jti`, the stream entry and
/// the message of each, and Apple's keys never met.
struct SecurityEventStoreTests {
    typealias Fixture = RedisNotificationStoreTests.Fixture
    static let clientID = "1234567890-abc.apps.googleusercontent.com"
    static let otherClientID = "1234567890-web.apps.googleusercontent.com"
    static let sub = "110248495921238986420"
    static let receivedAt: Int64 = 1_700_000_999_000
    static let risc = "https://schemas.openid.net/secevent/risc/event-type/"
    static let oauth = "https://schemas.openid.net/secevent/oauth/event-type/"

    static func set(
        _ events: [SecurityEvent], at iat: Int64, jti: String, clientIDs: [String] = [clientID]
    ) -> VerifiedSecurityEvent {
        VerifiedSecurityEvent(clientIDs: clientIDs, tokenID: jti, issuedAt: iat, events: events)
    }

    static func event(_ type: SecurityEventType, reason: String? = nil) -> SecurityEvent {
        SecurityEvent(type: type, rawType: type.uri, subject: sub, reason: reason)
    }

    static func userFields(_ fixture: Fixture, clientID: String = clientID) throws -> [String: String] {
        try #require(
            try fixture.connection.command("HGETALL", fixture.store.keys.googleUser(clientID: clientID, subject: sub))
                .fieldMap)
    }

    @Test("sessions-revoked: sessions_revoked_at = iat in ms, last_*, updated_at; stream and message say google")
    func sessionsRevoked() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let outcome = try fixture.store.apply(
            Self.set([Self.event(.sessionsRevoked)], at: 1_700_000_000, jti: "g-1"), receivedAt: Self.receivedAt)
        #expect(outcome == .applied)
        #expect(
            try Self.userFields(fixture) == [
                "sessions_revoked_at": "1700000000000", "last_event_type": "sessions-revoked",
                "last_event_at": "1700000000000", "last_jti": "g-1", "updated_at": String(Self.receivedAt),
            ])
        #expect(
            try fixture.streamEntries() == [
                [
                    "provider": "google", "client_id": Self.clientID, "sub": Self.sub, "type": "sessions-revoked",
                    "raw_type": Self.risc + "sessions-revoked", "event_time": "1700000000000", "jti": "g-1",
                    "applied": "1",
                ]
            ])
        #expect(
            try fixture.subscriber.messages(within: 2, limit: 1) == [
                "{\"provider\":\"google\",\"client_id\":\"\(Self.clientID)\",\"sub\":\"\(Self.sub)\","
                    + "\"type\":\"sessions-revoked\",\"raw_type\":\"\(Self.risc)sessions-revoked\","
                    + "\"event_time\":1700000000000,\"jti\":\"g-1\",\"applied\":true}"
            ])
        #expect(try fixture.connection.command("PTTL", "siwa:google:seen:g-1").integer ?? 0 > 0)
        // Apple's keys are never met.
        #expect(try fixture.connection.command("KEYS", "siwa:user:*").array?.isEmpty == true)
        #expect(try fixture.connection.command("KEYS", "siwa:seen:*").array?.isEmpty == true)
    }

    @Test("tokens-revoked and account-disabled for hijacking end sessions; bulk-account does not")
    func sessionEnders() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        _ = try fixture.store.apply(
            Self.set([Self.event(.tokensRevoked)], at: 1_700_000_000, jti: "g-t"), receivedAt: Self.receivedAt)
        #expect(try Self.userFields(fixture)["sessions_revoked_at"] == "1700000000000")
        _ = try fixture.store.apply(
            Self.set([Self.event(.accountDisabled, reason: "bulk-account")], at: 1_700_000_100, jti: "g-b"),
            receivedAt: Self.receivedAt)
        var fields = try Self.userFields(fixture)
        #expect(fields["sessions_revoked_at"] == "1700000000000")
        #expect(fields["account_disabled"] == "true")
        #expect(fields["account_disabled_reason"] == "bulk-account")
        _ = try fixture.store.apply(
            Self.set([Self.event(.accountDisabled, reason: "hijacking")], at: 1_700_000_200, jti: "g-h"),
            receivedAt: Self.receivedAt)
        fields = try Self.userFields(fixture)
        #expect(fields["sessions_revoked_at"] == "1700000200000")
        #expect(fields["account_disabled_reason"] == "hijacking")
        #expect(fields["account_state_at"] == "1700000200000")
    }

    @Test("account-enabled clears the disabled state and its reason; an older disabled does not come back")
    func enabledClears() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        _ = try fixture.store.apply(
            Self.set([Self.event(.accountDisabled, reason: "hijacking")], at: 1_700_000_000, jti: "g-d"),
            receivedAt: Self.receivedAt)
        #expect(
            try fixture.store.apply(
                Self.set([Self.event(.accountEnabled)], at: 1_700_000_500, jti: "g-e"), receivedAt: Self.receivedAt)
                == .applied)
        var fields = try Self.userFields(fixture)
        #expect(fields["account_disabled"] == "false")
        #expect(fields["account_disabled_reason"] == nil)
        #expect(fields["account_state_at"] == "1700000500000")
        #expect(fields["sessions_revoked_at"] == "1700000000000")
        // Delivered late: older than the enabled state, so stale; nothing changes.
        #expect(
            try fixture.store.apply(
                Self.set([Self.event(.accountDisabled, reason: "bulk-account")], at: 1_700_000_400, jti: "g-late"),
                receivedAt: Self.receivedAt + 1) == .stale)
        fields = try Self.userFields(fixture)
        #expect(fields["account_disabled"] == "false")
        #expect(fields["last_jti"] == "g-e")
        #expect(try fixture.streamEntries().last?["applied"] == "0")
    }

    @Test("account-credential-change-required is recorded in its own field")
    func credentialChange() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        #expect(
            try fixture.store.apply(
                Self.set([Self.event(.accountCredentialChangeRequired)], at: 1_700_000_000, jti: "g-c"),
                receivedAt: Self.receivedAt) == .applied)
        let fields = try Self.userFields(fixture)
        #expect(fields["credential_change_required_at"] == "1700000000000")
        #expect(fields["sessions_revoked_at"] == nil)
    }

    @Test("token-revoked: a stream entry with the token identifier, no user hash")
    func tokenRevoked() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let event = SecurityEvent(
            type: .tokenRevoked, rawType: Self.oauth + "token-revoked", subject: nil,
            revokedToken: RevokedToken(
                tokenType: "refresh_token", identifierAlgorithm: "prefix", identifier: "1/abcdefghijklmn"))
        #expect(
            try fixture.store.apply(Self.set([event], at: 1_700_000_000, jti: "g-r"), receivedAt: Self.receivedAt)
                == .recorded)
        #expect(
            try fixture.streamEntries() == [
                [
                    "provider": "google", "client_id": Self.clientID, "sub": "", "type": "token-revoked",
                    "raw_type": Self.oauth + "token-revoked", "event_time": "1700000000000", "jti": "g-r",
                    "applied": "0", "token_type": "refresh_token", "token_identifier_alg": "prefix",
                    "token": "1/abcdefghijklmn",
                ]
            ])
        #expect(try fixture.connection.command("KEYS", "siwa:google:user:*").array?.isEmpty == true)
    }

    @Test("verification: its state's hash (received_at, jti, client_id, event_time) expiring in 7 days")
    func verification() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let event = SecurityEvent(
            type: .verification, rawType: Self.risc + "verification", subject: nil, state: "st-42")
        #expect(
            try fixture.store.apply(Self.set([event], at: 1_700_000_000, jti: "g-v"), receivedAt: Self.receivedAt)
                == .recorded)
        let key = fixture.store.keys.googleVerification(state: "st-42")
        #expect(key == "siwa:google:verification:st-42")
        #expect(
            try fixture.connection.command("HGETALL", key).fieldMap == [
                "received_at": String(Self.receivedAt), "jti": "g-v", "client_id": Self.clientID,
                "event_time": "1700000000000",
            ])
        let ttl = try #require(try fixture.connection.command("PTTL", key).integer)
        #expect(ttl > 7 * 86_400_000 - 60_000 && ttl <= 7 * 86_400_000)
        #expect(try fixture.streamEntries().first?["state"] == "st-42")
    }

    @Test("an unknown type is kept in the stream, applied 0, and changes no hash")
    func unknownType() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let event = SecurityEvent(type: .unknown, rawType: Self.risc + "new-kind", subject: Self.sub)
        #expect(
            try fixture.store.apply(Self.set([event], at: 1_700_000_000, jti: "g-u"), receivedAt: Self.receivedAt)
                == .recorded)
        #expect(try fixture.streamEntries().first?["type"] == "unknown")
        #expect(try fixture.streamEntries().first?["raw_type"] == Self.risc + "new-kind")
        #expect(try fixture.connection.command("KEYS", "siwa:google:user:*").array?.isEmpty == true)
    }

    @Test("the same jti again: duplicate, nothing written, nothing published")
    func duplicate() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let set = Self.set([Self.event(.sessionsRevoked)], at: 1_700_000_000, jti: "g-dup")
        #expect(try fixture.store.apply(set, receivedAt: Self.receivedAt) == .applied)
        _ = try fixture.subscriber.messages(within: 2, limit: 1)
        let later = Self.set([Self.event(.sessionsRevoked)], at: 1_700_009_000, jti: "g-dup")
        #expect(try fixture.store.apply(later, receivedAt: Self.receivedAt + 5) == .duplicate)
        #expect(try fixture.streamEntries().count == 1)
        #expect(try Self.userFields(fixture)["sessions_revoked_at"] == "1700000000000")
        #expect(try fixture.subscriber.messages(within: 0.3).isEmpty)
    }

    @Test("an older sessions-revoked after a newer one is stale and moves nothing")
    func ordering() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        _ = try fixture.store.apply(
            Self.set([Self.event(.sessionsRevoked)], at: 1_700_000_500, jti: "g-new"), receivedAt: Self.receivedAt)
        #expect(
            try fixture.store.apply(
                Self.set([Self.event(.sessionsRevoked)], at: 1_700_000_100, jti: "g-old"), receivedAt: Self.receivedAt)
                == .stale)
        let fields = try Self.userFields(fixture)
        #expect(fields["sessions_revoked_at"] == "1700000500000")
        #expect(fields["last_jti"] == "g-new")
    }

    @Test("aud with two configured client IDs: each gets its own hash and entry")
    func twoClientIDs() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        _ = try fixture.store.apply(
            Self.set(
                [Self.event(.sessionsRevoked)], at: 1_700_000_000, jti: "g-2",
                clientIDs: [Self.clientID, Self.otherClientID]), receivedAt: Self.receivedAt)
        #expect(try Self.userFields(fixture)["sessions_revoked_at"] == "1700000000000")
        #expect(try Self.userFields(fixture, clientID: Self.otherClientID)["sessions_revoked_at"] == "1700000000000")
        #expect(try fixture.streamEntries().map { $0["client_id"] } == [Self.clientID, Self.otherClientID])
    }

    @Test("a user key of another type: the record-specific refusal, nothing written, not marked seen")
    func wrongType() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        _ = try fixture.connection.command(
            "SET", fixture.store.keys.googleUser(clientID: Self.clientID, subject: Self.sub), "x")
        do {
            _ = try fixture.store.apply(
                Self.set([Self.event(.sessionsRevoked)], at: 1_700_000_000, jti: "g-w"), receivedAt: Self.receivedAt)
            Issue.record("applied over a string key")
        } catch { #expect(error.isRecordSpecific) }
        #expect(try fixture.connection.command("EXISTS", "siwa:google:seen:g-w").integer == 0)
        #expect(try fixture.connection.command("EXISTS", "siwa:events").integer == 0)
    }
}
