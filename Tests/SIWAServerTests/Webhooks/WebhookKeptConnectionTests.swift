import Foundation
import SIWAJSON
import Testing

/// The real `siwa-endpoint deliver` on kept connections: one per destination, reused from event
/// to event, closed once idle for `SIWA_WEBHOOK_KEEPALIVE_MS`; `keep_connection` false opens one
/// per event, as before.
@Suite struct WebhookKeptConnectionTests {
    @Test("five events: one connection for the kept destination, five for keep_connection false; idle closed")
    func keptAndFresh() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let kept = try stack.receiver("kept")
        let fresh = try stack.receiver("fresh")
        let environment = try stack.environment(
            [
                stack.destination("kept", kept),
                stack.destination("fresh", fresh, extra: [("keep_connection", .bool(false))]),
            ], ["SIWA_WEBHOOK_KEEPALIVE_MS": "1000"])
        try stack.startDeliverer(environment)
        for index in 1...5 {
            try stack.add("consent-revoked", jti: "kept-\(index)")
            // One at a time, so that each POST could have gone on a connection of its own.
            #expect(waitUntil(timeout: 10) { kept.ids().count == index && fresh.ids().count == index })
        }
        let messageIDs = Set(kept.ids())
        #expect(messageIDs.count == 5)
        #expect(kept.connections(of: messageIDs) == [1, 1, 1, 1, 1])
        #expect(fresh.connections(of: Set(fresh.ids())) == [1, 2, 3, 4, 5])
        // Unused for a second, the kept connection is closed by the deliverer itself.
        #expect(waitUntil(timeout: 10) { kept.connectionEvents() == ["open 1", "closed 1"] })
        // The next event opens a new one.
        try stack.add("consent-revoked", jti: "kept-6")
        #expect(waitUntil(timeout: 10) { kept.ids().count == 6 })
        #expect(kept.connections(of: Set(kept.ids())) == [1, 1, 1, 1, 1, 2])
    }
}
