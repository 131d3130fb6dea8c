import Foundation
import SIWARedis
import SIWAVerification
import Testing

@testable import SIWAStore

/// The state contract, checked field by field against a real redis-server.
struct RedisNotificationStoreTests {
    static let clientID = "com.example.app"
    static let subject = "820417.faa325acbc78e1be1668ba852d492d8a.0219"
    static let receivedAt: Int64 = 1_700_000_999_000

    /// A running server, a store on it, and a subscriber already listening.
    final class Fixture {
        let server: RedisServerProcess
        let connection: RedisConnection
        let store: NotificationStore
        let subscriber: RedisTestSubscriber

        init() throws {
            server = try RedisServerProcess()
            do {
                connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
                store = NotificationStore(connection: connection)
                subscriber = try RedisTestSubscriber(port: server.port, channel: "siwa:notifications")
            } catch {
                server.shutdown()
                throw error
            }
        }

        func close() { server.shutdown() }

        var userKey: String { store.keys.user(clientID: clientID, subject: subject) }

        func userFields() throws -> [String: String] {
            try #require(try connection.command("HGETALL", userKey).fieldMap)
        }

        /// Every stream entry's fields, oldest first.
        func streamEntries() throws -> [[String: String]] {
            let entries = try #require(try connection.command("XRANGE", "siwa:events", "-", "+").array)
            return try entries.map { entry in
                let parts = try #require(entry.array)
                return try #require(parts.last?.fieldMap)
            }
        }
    }

    static func notification(
        _ rawType: String, at eventTime: Int64, jti: String, email: String? = nil, isPrivateEmail: Bool? = nil
    ) -> VerifiedNotification {
        VerifiedNotification(
            clientID: clientID, subject: subject, type: NotificationEventType(rawType: rawType), rawType: rawType,
            eventTimeMilliseconds: eventTime, tokenID: jti, issuedAt: eventTime / 1000,
            expiresAt: eventTime / 1000 + 86_400, email: email, isPrivateEmail: isPrivateEmail)
    }

    static func message(_ type: String, _ rawType: String, _ eventTime: Int64, _ jti: String, applied: Bool) -> String {
        "{\"provider\":\"apple\",\"client_id\":\"\(clientID)\",\"sub\":\"\(subject)\",\"type\":\"\(type)\",\"raw_type\":\"\(rawType)\","
            + "\"event_time\":\(eventTime),\"jti\":\"\(jti)\",\"applied\":\(applied)}"
    }

    static func streamEntry(
        _ type: String, _ rawType: String, _ eventTime: Int64, _ jti: String, applied: Bool,
        extra: [String: String] = [:]
    ) -> [String: String] {
        [
            "provider": "apple", "client_id": clientID, "sub": subject, "type": type, "raw_type": rawType,
            "event_time": String(eventTime), "jti": jti, "applied": applied ? "1" : "0",
        ].merging(extra) { $1 }
    }

    // MARK: - One of each type

    @Test func consentRevokedFields() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let outcome = try fixture.store.apply(
            Self.notification("consent-revoked", at: 1_700_000_000_000, jti: "jti-consent-1"),
            receivedAt: Self.receivedAt)
        #expect(outcome == .applied)
        #expect(
            try fixture.userFields() == [
                "sessions_revoked_at": "1700000000000", "consent_revoked_at": "1700000000000",
                "last_event_type": "consent-revoked", "last_event_at": "1700000000000", "last_jti": "jti-consent-1",
                "updated_at": "1700000999000",
            ])
        #expect(
            try fixture.streamEntries() == [
                Self.streamEntry(
                    "consent-revoked", "consent-revoked", 1_700_000_000_000, "jti-consent-1", applied: true)
            ])
        #expect(
            try fixture.subscriber.messages(within: 2, limit: 1) == [
                Self.message("consent-revoked", "consent-revoked", 1_700_000_000_000, "jti-consent-1", applied: true)
            ])
        // The seen marker: value = receive time, TTL 30 days.
        let seenKey = fixture.store.keys.seen(clientID: Self.clientID, subject: Self.subject, tokenID: "jti-consent-1")
        #expect(seenKey == "siwa:seen:{com.example.app:820417.faa325acbc78e1be1668ba852d492d8a.0219}:jti-consent-1")
        #expect(try fixture.connection.command("GET", seenKey).string == "1700000999000")
        let ttl = try #require(try fixture.connection.command("PTTL", seenKey).integer)
        #expect(ttl > 30 * 86_400_000 - 60_000 && ttl <= 30 * 86_400_000)
    }

    @Test func accountDeletedFieldsAndTheOldSpelling() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        // Apple's earlier spelling is the same event; raw_type keeps what was sent.
        let outcome = try fixture.store.apply(
            Self.notification("account-delete", at: 1_700_000_000_000, jti: "jti-delete-1"),
            receivedAt: Self.receivedAt)
        #expect(outcome == .applied)
        #expect(
            try fixture.userFields() == [
                "sessions_revoked_at": "1700000000000", "account_deleted_at": "1700000000000",
                "email_forwarding": "disabled", "email_forwarding_at": "1700000000000",
                "last_event_type": "account-deleted", "last_event_at": "1700000000000", "last_jti": "jti-delete-1",
                "updated_at": "1700000999000",
            ])
        #expect(
            try fixture.streamEntries() == [
                Self.streamEntry("account-deleted", "account-delete", 1_700_000_000_000, "jti-delete-1", applied: true)
            ])
        #expect(
            try fixture.subscriber.messages(within: 2, limit: 1) == [
                Self.message("account-deleted", "account-delete", 1_700_000_000_000, "jti-delete-1", applied: true)
            ])
    }

    @Test(arguments: [("email-enabled", "enabled"), ("email-disabled", "disabled")])
    func emailEventFields(rawType: String, forwarding: String) throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let outcome = try fixture.store.apply(
            Self.notification(
                rawType, at: 1_700_000_000_000, jti: "jti-mail-1", email: "abc@privaterelay.appleid.com",
                isPrivateEmail: true),
            receivedAt: Self.receivedAt)
        #expect(outcome == .applied)
        #expect(
            try fixture.userFields() == [
                "email_forwarding": forwarding, "email_forwarding_at": "1700000000000",
                "email": "abc@privaterelay.appleid.com", "is_private_email": "true", "last_event_type": rawType,
                "last_event_at": "1700000000000", "last_jti": "jti-mail-1", "updated_at": "1700000999000",
            ])
        // The stream never holds an address: an entry cannot be scrubbed after account-deleted.
        #expect(
            try fixture.streamEntries() == [
                Self.streamEntry(rawType, rawType, 1_700_000_000_000, "jti-mail-1", applied: true)
            ])
        let messages = try fixture.subscriber.messages(within: 2, limit: 1)
        #expect(messages == [Self.message(rawType, rawType, 1_700_000_000_000, "jti-mail-1", applied: true)])
        #expect(!messages.joined().contains("@"))
    }

    @Test func unknownTypeGoesToTheStreamOnly() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let outcome = try fixture.store.apply(
            Self.notification("payment-method-changed", at: 1_700_000_000_000, jti: "jti-new-1"),
            receivedAt: Self.receivedAt)
        #expect(outcome == .recorded)
        #expect(try fixture.connection.command("EXISTS", fixture.userKey) == .integer(0))
        #expect(
            try fixture.streamEntries() == [
                Self.streamEntry("unknown", "payment-method-changed", 1_700_000_000_000, "jti-new-1", applied: false)
            ])
        #expect(
            try fixture.subscriber.messages(within: 2, limit: 1) == [
                Self.message("unknown", "payment-method-changed", 1_700_000_000_000, "jti-new-1", applied: false)
            ])
        // Marked seen, so a redelivery is not recorded twice.
        #expect(
            try fixture.store.apply(
                Self.notification("payment-method-changed", at: 1_700_000_000_000, jti: "jti-new-1"),
                receivedAt: Self.receivedAt + 5) == .duplicate)
        #expect(try fixture.streamEntries().count == 1)
    }

    // MARK: - Idempotency and ordering

    @Test func duplicateJTIChangesNothing() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let first = Self.notification(
            "email-enabled", at: 1_700_000_000_000, jti: "jti-dup", email: "a@privaterelay.appleid.com",
            isPrivateEmail: true)
        #expect(try fixture.store.apply(first, receivedAt: Self.receivedAt) == .applied)
        let fieldsBefore = try fixture.userFields()
        #expect(try fixture.subscriber.messages(within: 2, limit: 1).count == 1)

        // Same jti, even with different content and a later time: nothing changes.
        let replay = Self.notification(
            "email-disabled", at: 1_700_000_500_000, jti: "jti-dup", email: "b@privaterelay.appleid.com",
            isPrivateEmail: false)
        #expect(try fixture.store.apply(replay, receivedAt: Self.receivedAt + 1000) == .duplicate)
        #expect(try fixture.userFields() == fieldsBefore)
        #expect(try fixture.streamEntries().count == 1)
        #expect(try fixture.subscriber.messages(within: 0.5) == [])
        let seenKey = fixture.store.keys.seen(clientID: Self.clientID, subject: Self.subject, tokenID: "jti-dup")
        #expect(try fixture.connection.command("GET", seenKey).string == "1700000999000")
    }

    /// A call whose reply was lost (a timeout, a dropped connection) may have run after all:
    /// its seen marker holds its receive time. A later call for the same delivery that names
    /// that time is told `stored` (this delivery wrote it), one that does not is a `duplicate`;
    /// neither changes anything.
    @Test func earlierAttemptThatRanIsStoredNotDuplicate() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let notification = Self.notification("consent-revoked", at: 1_700_000_000_000, jti: "jti-attempt")
        #expect(try fixture.store.apply(notification, receivedAt: Self.receivedAt) == .applied)
        let fieldsBefore = try fixture.userFields()
        #expect(try fixture.subscriber.messages(within: 2, limit: 1).count == 1)

        #expect(
            try fixture.store.apply(notification, receivedAt: Self.receivedAt + 500, earlierAttempt: Self.receivedAt)
                == .stored)
        #expect(
            try fixture.store.apply(
                notification, receivedAt: Self.receivedAt + 900, earlierAttempt: Self.receivedAt - 1) == .duplicate)
        #expect(try fixture.store.apply(notification, receivedAt: Self.receivedAt + 1000) == .duplicate)
        #expect(try fixture.userFields() == fieldsBefore)
        #expect(try fixture.streamEntries().count == 1)
        #expect(try fixture.subscriber.messages(within: 0.5) == [])
        let seenKey = fixture.store.keys.seen(clientID: Self.clientID, subject: Self.subject, tokenID: "jti-attempt")
        #expect(try fixture.connection.command("GET", seenKey).string == String(Self.receivedAt))
    }

    @Test func olderEmailEventIsStale() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let newer = Self.notification(
            "email-disabled", at: 1_700_000_200_000, jti: "jti-newer", email: "new@privaterelay.appleid.com",
            isPrivateEmail: true)
        let older = Self.notification(
            "email-enabled", at: 1_700_000_100_000, jti: "jti-older", email: "old@example.com", isPrivateEmail: false)
        #expect(try fixture.store.apply(newer, receivedAt: Self.receivedAt) == .applied)
        let fieldsBefore = try fixture.userFields()
        #expect(try fixture.store.apply(older, receivedAt: Self.receivedAt + 1000) == .stale)
        #expect(try fixture.userFields() == fieldsBefore)
        #expect(fieldsBefore["email_forwarding"] == "disabled")
        #expect(fieldsBefore["email"] == "new@privaterelay.appleid.com")
        #expect(fieldsBefore["updated_at"] == "1700000999000")
        // On the stream with applied=0 and without the address that was not stored.
        #expect(
            try fixture.streamEntries().last
                == Self.streamEntry("email-enabled", "email-enabled", 1_700_000_100_000, "jti-older", applied: false))
        #expect(
            try fixture.subscriber.messages(within: 2, limit: 2).last
                == Self.message("email-enabled", "email-enabled", 1_700_000_100_000, "jti-older", applied: false))
        // Marked seen all the same.
        #expect(try fixture.store.apply(older, receivedAt: Self.receivedAt + 2000) == .duplicate)
    }

    @Test func newerEmailEventWithoutFlagDropsTheOldFlag() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        _ = try fixture.store.apply(
            Self.notification(
                "email-enabled", at: 1_700_000_000_000, jti: "jti-a", email: "a@privaterelay.appleid.com",
                isPrivateEmail: true),
            receivedAt: Self.receivedAt)
        #expect(
            try fixture.store.apply(
                Self.notification("email-disabled", at: 1_700_000_100_000, jti: "jti-b", email: "b@example.com"),
                receivedAt: Self.receivedAt + 1) == .applied)
        let fields = try fixture.userFields()
        #expect(fields["email"] == "b@example.com")
        #expect(fields["is_private_email"] == nil)
        #expect(fields["email_forwarding"] == "disabled")
        #expect(fields["email_forwarding_at"] == "1700000100000")
        #expect(fields["updated_at"] == "1700000999001")
    }

    @Test func consentRevokedAfterAccountDeletedKeepsTheMaximum() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        #expect(
            try fixture.store.apply(
                Self.notification("account-deleted", at: 1_700_000_500_000, jti: "jti-deleted"),
                receivedAt: Self.receivedAt) == .applied)
        // Delivered later, happened earlier: its own field is set, the maximum stays.
        #expect(
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_400_000, jti: "jti-consent"),
                receivedAt: Self.receivedAt + 1000) == .applied)
        #expect(
            try fixture.userFields() == [
                "sessions_revoked_at": "1700000500000", "account_deleted_at": "1700000500000",
                "consent_revoked_at": "1700000400000", "email_forwarding": "disabled",
                "email_forwarding_at": "1700000500000", "last_event_type": "account-deleted",
                "last_event_at": "1700000500000", "last_jti": "jti-deleted", "updated_at": "1700001000000",
            ])
        // A later consent-revoked raises both.
        #expect(
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_600_000, jti: "jti-consent-2"),
                receivedAt: Self.receivedAt + 2000) == .applied)
        let fields = try fixture.userFields()
        #expect(fields["sessions_revoked_at"] == "1700000600000")
        #expect(fields["consent_revoked_at"] == "1700000600000")
        #expect(fields["account_deleted_at"] == "1700000500000")
        #expect(fields["last_event_type"] == "consent-revoked")
        #expect(fields["last_jti"] == "jti-consent-2")
        // An older consent-revoked than the stored one is stale and changes nothing.
        #expect(
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_300_000, jti: "jti-consent-0"),
                receivedAt: Self.receivedAt + 3000) == .stale)
        #expect(try fixture.userFields() == fields)
        #expect(try fixture.streamEntries().map { $0["applied"] } == ["1", "1", "1", "0"])
    }

    @Test func accountDeletedPurgesEmailAndNoEmailComesBack() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        _ = try fixture.store.apply(
            Self.notification(
                "email-enabled", at: 1_700_000_000_000, jti: "jti-mail", email: "a@privaterelay.appleid.com",
                isPrivateEmail: true),
            receivedAt: Self.receivedAt)
        #expect(try fixture.userFields()["email"] == "a@privaterelay.appleid.com")

        #expect(
            try fixture.store.apply(
                Self.notification("account-deleted", at: 1_700_000_100_000, jti: "jti-delete"),
                receivedAt: Self.receivedAt + 1) == .applied)
        let afterDeletion = try fixture.userFields()
        #expect(
            afterDeletion == [
                "sessions_revoked_at": "1700000100000", "account_deleted_at": "1700000100000",
                "email_forwarding": "disabled", "email_forwarding_at": "1700000100000",
                "last_event_type": "account-deleted", "last_event_at": "1700000100000", "last_jti": "jti-delete",
                "updated_at": "1700000999001",
            ])

        // A later email-enabled (by event time) restores nothing.
        #expect(
            try fixture.store.apply(
                Self.notification(
                    "email-enabled", at: 1_700_000_200_000, jti: "jti-mail-late", email: "b@privaterelay.appleid.com",
                    isPrivateEmail: true),
                receivedAt: Self.receivedAt + 2) == .stale)
        #expect(try fixture.userFields() == afterDeletion)
        let late = try #require(try fixture.streamEntries().last)
        #expect(
            late
                == Self.streamEntry(
                    "email-enabled", "email-enabled", 1_700_000_200_000, "jti-mail-late", applied: false))
        #expect(late["email"] == nil)
    }

    @Test func usersAndAppsAreKeptApart() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let other = VerifiedNotification(
            clientID: "com.example.other", subject: Self.subject, type: .consentRevoked, rawType: "consent-revoked",
            eventTimeMilliseconds: 1_700_000_000_000, tokenID: "jti-shared", issuedAt: 1_700_000_000,
            expiresAt: nil, email: nil, isPrivateEmail: nil)
        #expect(try fixture.store.apply(other, receivedAt: Self.receivedAt) == .applied)
        // The same jti for another app is not a duplicate here.
        #expect(
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_000_000, jti: "jti-shared"),
                receivedAt: Self.receivedAt) == .applied)
        let otherKey = fixture.store.keys.user(clientID: "com.example.other", subject: Self.subject)
        #expect(otherKey == "siwa:user:{com.example.other:820417.faa325acbc78e1be1668ba852d492d8a.0219}")
        #expect(try fixture.connection.command("HGET", otherKey, "consent_revoked_at").string == "1700000000000")
        #expect(try fixture.userFields()["consent_revoked_at"] == "1700000000000")
    }

    @Test func unsafeKeyPartsAreRefused() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let braced = VerifiedNotification(
            clientID: Self.clientID, subject: "abc}:x", type: .consentRevoked, rawType: "consent-revoked",
            eventTimeMilliseconds: 1, tokenID: "j", issuedAt: 0, expiresAt: nil, email: nil, isPrivateEmail: nil)
        #expect(throws: RedisError(.unsafeKey, "")) { try fixture.store.apply(braced, receivedAt: 1) }
        #expect(try fixture.connection.command("DBSIZE") == .integer(0))
    }

    /// The shared stream key is checked before the user's hash: with both of the wrong type,
    /// the refusal names the stream (about the deployment), not the record.
    @Test func wrongTypeStreamIsAboutTheDeployment() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        _ = try fixture.connection.command("SADD", "siwa:events", "x")
        _ = try fixture.connection.command(
            "SET", fixture.store.keys.user(clientID: Self.clientID, subject: Self.subject), "s")
        let notification = Self.notification("consent-revoked", at: 1_700_000_000_000, jti: "jti-stream")
        do {
            _ = try fixture.store.apply(notification, receivedAt: Self.receivedAt)
            Issue.record("applied despite a set at siwa:events")
        } catch {
            #expect(error.code == .serverError)
            #expect(
                error.message
                    == "WRONGTYPE the events key siwa:events holds a set, not a stream: every notification is refused "
                    + "until it is deleted or renamed")
            #expect(!error.isRecordSpecific)
        }
        #expect(try fixture.connection.command("DBSIZE") == .integer(2))
        #expect(try fixture.connection.command("SCARD", "siwa:events") == .integer(1))
        // With the stream fixed, the user's own hash of the wrong type is the record's refusal.
        _ = try fixture.connection.command("DEL", "siwa:events")
        do {
            _ = try fixture.store.apply(notification, receivedAt: Self.receivedAt)
            Issue.record("applied despite a string at the user key")
        } catch {
            #expect(error.message == RedisError.userKeyWrongTypeReply)
            #expect(error.isRecordSpecific)
        }
        #expect(try fixture.connection.command("DBSIZE") == .integer(1))
    }

    /// The seen marker is this record's own key: one of another type is read as seen, never
    /// an error (which, not being the user hash's, would block every record behind it).
    @Test func seenMarkerOfAnotherTypeIsADuplicate() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let seenKey = fixture.store.keys.seen(clientID: Self.clientID, subject: Self.subject, tokenID: "jti-hash")
        _ = try fixture.connection.command("HSET", seenKey, "f", "v")
        let notification = Self.notification("consent-revoked", at: 1_700_000_000_000, jti: "jti-hash")
        #expect(try fixture.store.apply(notification, receivedAt: Self.receivedAt, earlierAttempt: 5) == .duplicate)
        #expect(try fixture.connection.command("DBSIZE") == .integer(1))
        #expect(try fixture.connection.command("TYPE", seenKey) == .status("hash"))
    }

    // MARK: - Script cache and outages

    @Test func reloadsTheScriptAfterScriptFlush() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        #expect(
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_000_000, jti: "jti-1"), receivedAt: Self.receivedAt)
                == .applied)
        #expect(try fixture.connection.command("SCRIPT", "FLUSH") == .status("OK"))
        #expect(
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_100_000, jti: "jti-2"), receivedAt: Self.receivedAt)
                == .applied)
        #expect(try fixture.userFields()["consent_revoked_at"] == "1700000100000")
        // Exactly one script is cached again: the store loaded it once more.
        let info = try #require(try fixture.connection.command("INFO", "memory").string)
        #expect(info.contains("number_of_cached_scripts:1"))
    }

    @Test func failsWhileRedisIsDownAndRecoversAfterRestart() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        #expect(fixture.store.ping())
        #expect(
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_000_000, jti: "jti-1"), receivedAt: Self.receivedAt)
                == .applied)

        fixture.server.kill()
        #expect(!fixture.store.ping())
        #expect {
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_100_000, jti: "jti-2"), receivedAt: Self.receivedAt)
        } throws: { error in
            (error as? RedisError)?.isConnectionError == true
        }

        // A fresh server (no persistence in tests): empty, and without the script.
        try fixture.server.start()
        #expect(fixture.store.ping())
        #expect(
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_100_000, jti: "jti-2"), receivedAt: Self.receivedAt)
                == .applied)
        #expect(try fixture.userFields()["consent_revoked_at"] == "1700000100000")
    }

    @Test func retriesOnceWhenTheIdleConnectionWasClosed() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        #expect(
            try fixture.store.apply(
                Self.notification("consent-revoked", at: 1_700_000_000_000, jti: "jti-1"), receivedAt: Self.receivedAt)
                == .applied)
        // Redis restarts while our connection sits idle: the first write hits a dead
        // socket; the store reconnects, reloads the script and applies it.
        try fixture.server.restart()
        #expect(
            try fixture.store.apply(
                Self.notification("account-deleted", at: 1_700_000_100_000, jti: "jti-2"), receivedAt: Self.receivedAt)
                == .applied)
        #expect(try fixture.userFields()["account_deleted_at"] == "1700000100000")
    }

    @Test func customPrefixTTLAndStreamLength() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
        let store = NotificationStore(
            connection: connection, keyPrefix: "app1", seenMarkerTTL: .seconds(60), streamMaximumLength: 10)
        var ttl: Int64?
        for index in 0..<300 {
            _ = try store.apply(
                Self.notification("consent-revoked", at: 1_700_000_000_000 + Int64(index), jti: "jti-\(index)"),
                receivedAt: Self.receivedAt)
            // The first marker's TTL read at once, not after 299 more round trips a loaded
            // machine could stretch past the margin.
            if index == 0 {
                ttl = try connection.command("PTTL", "app1:seen:{\(Self.clientID):\(Self.subject)}:jti-0").integer
            }
        }
        #expect(ttl.map { $0 > 50_000 && $0 <= 60_000 } == true, "PTTL \(String(describing: ttl))")
        // MAXLEN ~ trims whole macro nodes (100 entries by default), so "about 10" means well under 300.
        let length = try #require(try connection.command("XLEN", "app1:events").integer)
        #expect(length >= 10 && length < 300)
        #expect(
            try connection.command("HGET", "app1:user:{\(Self.clientID):\(Self.subject)}", "last_jti").string
                == "jti-299")
        #expect(try connection.command("EXISTS", "siwa:events") == .integer(0))
    }
}
