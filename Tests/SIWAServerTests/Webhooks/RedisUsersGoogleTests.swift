import Foundation
import SIWARedis
import SIWAStore
import SIWAVerification
import Testing

/// Google's script under serve's shipped Redis user: every command it runs is allowed
/// (the verification hash's PEXPIRE included), so a Google token is never refused NOPERM.
struct RedisUsersGoogleTests {
    @Test("serve's user applies Google's events, the verification hash with its expiry included")
    func serveAppliesGoogleEvents() throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        try RedisUsersTests.loadShippedUsers(redis.unixSocketConnection())
        let store = NotificationStore(connection: RedisUsersTests.connection("siwa-serve", redis))
        let clientID = "1-a.apps.googleusercontent.com"
        let events = [
            SecurityEvent(type: .sessionsRevoked, rawType: SecurityEventType.sessionsRevoked.uri, subject: "42"),
            SecurityEvent(
                type: .verification, rawType: SecurityEventType.verification.uri, subject: nil, state: "acl-state"),
        ]
        let outcome = try store.apply(
            VerifiedSecurityEvent(clientIDs: [clientID], tokenID: "acl-1", issuedAt: 1_700_000_000, events: events),
            receivedAt: 1_700_000_001_000)
        #expect(outcome == .applied)
        let admin = redis.unixSocketConnection()
        #expect(try admin.command("PTTL", "siwa:google:verification:acl-state").integer ?? -1 > 0)
        #expect(
            try admin.command("HGET", "siwa:google:user:{\(clientID):42}", "sessions_revoked_at").string
                == "1700000000000")
    }
}
