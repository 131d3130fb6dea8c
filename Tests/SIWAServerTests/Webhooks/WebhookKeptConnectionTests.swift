import Foundation
import SIWAJSON
import SIWASettingKeys
import SIWASettings
import SIWAWebhooks
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
            ], ["SIWA_WEBHOOK_KEEPALIVE_MS": "5000"])
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
        // Unused for five seconds, the kept connection is closed by the deliverer itself (five,
        // not one: on a loaded machine one event's gap, the fresh destination's handshake
        // included, could pass a second and close it before the next event).
        #expect(waitUntil(timeout: 20) { kept.connectionEvents() == ["open 1", "closed 1"] })
        // The next event opens a new one.
        try stack.add("consent-revoked", jti: "kept-6")
        #expect(waitUntil(timeout: 10) { kept.ids().count == 6 })
        #expect(kept.connections(of: Set(kept.ids())) == [1, 1, 1, 1, 1, 2])
    }

    @Test("keep_connection: true unless set false; anything but a boolean is refused, named")
    func keepConnectionMember() throws {
        func parse(_ extra: String) throws(WebhookSettingError) -> WebhookDestination? {
            let text =
                #"{"destinations": [{"name": "a", "url": "https://hooks.example.com/x", "#
                + #""signing_key_files": ["/nowhere.key"]\#(extra)}]}"#
            return try WebhookDestinationsFile.parse(Array(text.utf8), readKeys: false).first
        }
        #expect(try parse("")?.keepConnection == true)
        #expect(try parse(#", "keep_connection": true"#)?.keepConnection == true)
        #expect(try parse(#", "keep_connection": false"#)?.keepConnection == false)
        #expect(throws: WebhookSettingError.self) { try parse(#", "keep_connection": "no""#) }
        do {
            _ = try parse(#", "keep_connection": 0"#)
            Issue.record("keep_connection 0 was accepted")
        } catch {
            #expect(error.message == #"destination a: "keep_connection" must be true or false"#)
        }
    }

    @Test("SIWA_WEBHOOK_KEEPALIVE_MS: 30 s by default, 1 s to 5 min, outside refused naming the setting")
    func keepAliveSetting() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keepalive-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("webhooks.json").path
        try #"{"destinations": []}"#.write(toFile: file, atomically: true, encoding: .utf8)
        func configuration(_ value: String?) throws(ConfigurationError) -> WebhookConfiguration {
            var environment = ["SIWA_WEBHOOK_DESTINATIONS": file, "SIWA_REDIS_URL": "redis://127.0.0.1:6379/0"]
            environment["SIWA_WEBHOOK_KEEPALIVE_MS"] = value
            return try WebhookConfiguration(environment: environment, readKeys: false)
        }
        #expect(try configuration(nil).keepAlive == .seconds(30))
        #expect(try configuration("1000").keepAlive == .seconds(1))
        #expect(try configuration("300000").keepAlive == .seconds(300))
        for refused in ["999", "300001", "ten"] {
            do {
                _ = try configuration(refused)
                Issue.record("SIWA_WEBHOOK_KEEPALIVE_MS=\(refused) was accepted")
            } catch {
                #expect(error.setting == "SIWA_WEBHOOK_KEEPALIVE_MS", "\(refused): \(error)")
            }
        }
    }
}
