import Foundation
import SIWARedis
import SIWAStore
import SIWAVerification
import Testing

/// The readers' side of an app transfer (Python, Node.js, Ruby): a transfer identifier or an
/// old sub resolved to the new sub, a session looked up under the old sub ended by a logout
/// that arrived under the new one, and Apple's private relay addresses of both domains. The
/// records are written by the store `transfer import` runs, the notification by the
/// responder's own script, into a real redis-server.
@Suite("The readers after an app transfer (Python, Node.js, Ruby)", .serialized)
struct TransferReaderTests {
    typealias Reader = ExampleReaderTests.Reader
    static let client = "com.example.app"

    @Test(
        "resolve a transfer identifier or an old sub; the old sub's session sees the new sub's logout; relay addresses",
        arguments: Reader.allCases)
    func readersAfterATransfer(_ reader: Reader) throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: redis.url()))
        let store = TransferStore(connection: connection, keyPrefix: "siwa", clientID: Self.client)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        _ = try store.recordWindow(date: now - 86_400_000, target: "RECIPIENT1", replacing: false, at: now)
        try store.recordExport(
            subject: "000070.old", target: "RECIPIENT1", transferSubject: "tr.read.0001", error: nil, at: now,
            expiresAt: now + 86_400_000)
        _ = try store.recordImport(
            transferSubject: "tr.read.0001", subject: "000070.new", error: nil, fromSubject: "000070.old", at: now,
            expiresAt: now + 86_400_000)
        // The consent-revoked logout arrives under the new sub only.
        let revokedAt = now - 5000
        let outcome = try NotificationStore(connection: connection).apply(
            VerifiedNotification(
                clientID: Self.client, subject: "000070.new", type: .consentRevoked, rawType: "consent-revoked",
                eventTimeMilliseconds: revokedAt, tokenID: "reader-transfer", issuedAt: revokedAt / 1000,
                expiresAt: revokedAt / 1000 + 86_400, email: nil, isPrivateEmail: nil),
            receivedAt: revokedAt + 1000)
        #expect(outcome == .applied)

        let url = ["--redis-url", redis.url()]
        func resolve(_ identifier: String) throws -> String {
            try reader.run("resolve", url + ["--client-id", Self.client, "--id", identifier])
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }
        #expect(try ExampleFiles.flatJSON(try resolve("tr.read.0001")) == ["sub": "000070.new"])
        #expect(try ExampleFiles.flatJSON(try resolve("000070.old")) == ["sub": "000070.new"])
        #expect(try ExampleFiles.flatJSON(try resolve("000070.never")) == ["sub": "null"])

        func sessionValid(_ sub: String, startedAt: Int64) throws -> String? {
            try ExampleFiles.flatJSON(
                try reader.run(
                    "state",
                    url + ["--client-id", Self.client, "--sub", sub, "--session-started-at", String(startedAt)])
            )["session_valid"]
        }
        #expect(try sessionValid("000070.old", startedAt: revokedAt) == "false")
        #expect(try sessionValid("000070.old", startedAt: revokedAt + 1) == "true")

        let addresses = [
            "a1b2c3@private.icloud.com": "true", "a1b2c3@privaterelay.appleid.com": "true",
            "A1B2@Private.iCloud.com": "true", "someone@icloud.com": "false", "x@notprivaterelay.appleid.com": "false",
            "private.icloud.com": "false",
        ]
        let answer = try reader.run("relay", ["--emails", addresses.keys.sorted().joined(separator: ",")])
        #expect(try ExampleFiles.flatJSON(answer) == addresses)
    }
}
