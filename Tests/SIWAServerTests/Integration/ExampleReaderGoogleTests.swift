import Foundation
import SIWAJSON
import SIWARedis
import SIWAStore
import SIWAVerification
import Testing

/// The readers of docs/contract.md learn Google's user hash (contract version 2): each
/// reader's `state --provider google` against what the store's Google script wrote on a real
/// redis-server, and Apple's `state` of the same IDs untouched by it.
@Suite("The readers of Google's user hash (Python, Node.js, Ruby)")
struct ExampleReaderGoogleTests {
    static let clientID = "1-reader.apps.googleusercontent.com"

    @Test(
        "sessions revoked, then the account disabled: each reader says so",
        arguments: ExampleReaderTests.Reader.allCases)
    func googleState(_ reader: ExampleReaderTests.Reader) throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        let store = NotificationStore(connection: RedisConnection(endpoint: try RedisEndpoint(parsing: redis.url())))
        let sessions = SecurityEvent(
            type: .sessionsRevoked, rawType: SecurityEventType.sessionsRevoked.uri, subject: "7001")
        _ = try store.apply(
            VerifiedSecurityEvent(
                clientIDs: [Self.clientID], tokenID: "rd-1", issuedAt: 1_700_000_000, events: [sessions]),
            receivedAt: 1_700_000_001_000)
        func state(_ sub: String, startedAt: Int64, provider: String = "google") throws -> JSONValue? {
            let output = try reader.run(
                "state",
                [
                    "--redis-url", redis.url(), "--client-id", Self.clientID, "--sub", sub, "--session-started-at",
                    String(startedAt), "--provider", provider,
                ])
            return try? StrictJSONParser.parse(Array(output.trimmingCharacters(in: .whitespacesAndNewlines).utf8))
        }
        guard case .object(let before)? = try state("7001", startedAt: 1_700_000_000_000) else {
            Issue.record("no JSON object from the \(reader.rawValue) reader")
            return
        }
        #expect(before["session_valid"] == .bool(false))
        #expect(before["sessions_revoked_at"] == .integer(1_700_000_000_000))
        #expect(before["account_disabled"] == .bool(false))
        guard case .object(let later)? = try state("7001", startedAt: 1_700_000_000_001) else { return }
        #expect(later["session_valid"] == .bool(true))

        let disabled = SecurityEvent(
            type: .accountDisabled, rawType: SecurityEventType.accountDisabled.uri, subject: "7001",
            reason: "bulk-account")
        _ = try store.apply(
            VerifiedSecurityEvent(
                clientIDs: [Self.clientID], tokenID: "rd-2", issuedAt: 1_700_000_100, events: [disabled]),
            receivedAt: 1_700_000_101_000)
        guard case .object(let after)? = try state("7001", startedAt: 1_700_000_200_000) else { return }
        #expect(after["account_disabled"] == .bool(true))
        #expect(after["account_disabled_reason"] == .string("bulk-account"))
        #expect(after["session_valid"] == .bool(false))
        // Apple's hash of the same IDs is another key: nothing there.
        guard case .object(let apple)? = try state("7001", startedAt: 1, provider: "apple") else { return }
        #expect(apple["sessions_revoked_at"] == .null)
    }
}
