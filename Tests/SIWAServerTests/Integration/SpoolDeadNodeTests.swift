import Foundation
import SIWATestKit
import Testing

/// Issue 7 §3: the spool of a node that died is replayed when it comes back, with the real
/// `serve` and a real redis-server (Apple is stood in for by the test's signing key).
@Suite("The spool of a dead node, end to end", .serialized)
struct SpoolDeadNodeTests {
    @Test("serve SIGKILLed with a spool: restarted on it once Redis is back, every record applied exactly once")
    func deadNodeSpoolIsReplayedOnRestart() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        stack.redis.kill()

        var tokenIDs: [String] = []
        let now = Int64(Date().timeIntervalSince1970)
        for index in 1...12 {
            let notification = TestNotification(
                type: "consent-revoked", subject: String(format: "000040.k.%04d", index), clientID: ServeStack.clientID,
                eventTimeMilliseconds: (now - 5) * 1000, issuedAt: now - 1)
            let response = try stack.post(Array(try notification.requestBody(signedWith: stack.key).utf8))
            #expect(response.status == 200)
            #expect(response.bodyText == #"{"status":"spooled"}"#)
            tokenIDs.append(notification.tokenID)
        }
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["depth"] == "12")

        // The node dies: no shutdown, no last replay.
        let killed = try #require(stack.serve)
        killed.kill()
        #expect(killed.waitForExit(timeout: 10) != nil)
        stack.serve = nil
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["depth"] == "12")

        // Redis comes back, then the node, on the same spool directory.
        try stack.redis.start()
        #expect(try stack.streamLength() == 0)
        stack.serve = try ServeProcess(
            environment: stack.environment, socketPath: stack.socketPath,
            logURL: stack.directory.appendingPathComponent("serve-restarted.log"))
        #expect(try stack.waitUntil(timeout: 60) { try stack.streamLength() >= Int64(tokenIDs.count) })
        #expect(stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_replayed").isEmpty == false })

        // Exactly once: each jti one stream entry, nothing else in the stream, the spool empty.
        let entries = try #require(try stack.redisConnection().command("XRANGE", "siwa:events", "-", "+").array)
        var streamTokenIDs: [String] = []
        for entry in entries {
            let fields = (entry.array?.last?.array ?? []).compactMap(\.string)
            guard let index = fields.firstIndex(of: "jti"), index + 1 < fields.count else { continue }
            streamTokenIDs.append(fields[index + 1])
        }
        #expect(entries.count == tokenIDs.count)
        #expect(streamTokenIDs.sorted() == tokenIDs.sorted())
        let status = try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)
        #expect(status["depth"] == "0")
        #expect(status["rejected"] == "0")
        #expect(try stack.health().jsonFields["spool_depth"] == "0")
        let replayed = stack.serve?.logLines(event: "spool_replayed") ?? []
        #expect(replayed.contains { $0.contains(#""applied":12"#) && $0.contains(#""duplicate":0"#) })
    }
}
