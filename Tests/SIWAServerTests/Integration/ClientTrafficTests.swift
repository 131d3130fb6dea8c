import Foundation
import SIWAFastCGIClient
import SIWARedis
import SIWATestKit
import Testing

/// The silence figures per configured client ID, from the real serve against a real Redis:
/// genuine notifications and their last time, refusals by reason with an unlisted `aud` in
/// one bucket, the thresholds, and the times kept in Redis across a restart.
@Suite("Per client ID: genuine notifications, silence and refusals", .serialized)
struct ClientTrafficTests {
    static func metricLines(_ stack: ServeStack) throws -> [String] {
        let response = try stack.request("GET", "/metrics")
        #expect(response.status == 200)
        return response.bodyText.split(separator: "\n").map(String.init).filter { $0.hasPrefix("siwa_client_") }
    }

    static func value(_ lines: [String], _ series: String) -> Double? {
        lines.first { $0.hasPrefix(series + " ") }.flatMap { Double($0.dropFirst(series.count + 1)) }
    }

    @Test("genuine, refused by reason (an unlisted aud one label, never its value), thresholds, P:clients")
    func countsAndLabels() throws {
        let stack = try ServeStack(extraEnvironment: ["SIWA_SILENCE_ALERT_HOURS_BY_CLIENT": "com.example.watch=24"])
        defer { stack.shutdown() }
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000028.a.0001")).status == 200)
        // Apple-signed for a Services ID nobody listed: 403, one bucket.
        let unlisted = try stack.post(
            try stack.body(type: "consent-revoked", sub: "000028.a.0002", clientID: "com.other.secret-name"))
        #expect(unlisted.status == 403 && unlisted.jsonFields["error"] == "aud_not_served")
        // Apple-signed, so its aud is named in the log line, for the operator to add.
        #expect(
            stack.serve?.logLines(event: "request").contains {
                $0.contains(#""error":"aud_not_served""#) && $0.contains(#""aud":"com.other.secret-name""#)
            } == true)
        // Forged under our kid, naming our client ID: a signature refusal, counted against it.
        let forger = try TestSigningKey.generate(keyID: stack.key.keyID)
        let forged = try stack.post(try stack.body(type: "consent-revoked", sub: "000028.a.0003", signedWith: forger))
        #expect(forged.status == 401 && forged.jsonFields["error"] == "signature_invalid")
        // Expired two days ago.
        let old = Int64(Date().timeIntervalSince1970) - 2 * 86_400
        let expired = try stack.post(
            Array(
                try TestNotification(
                    type: "consent-revoked", subject: "000028.a.0004", clientID: ServeStack.clientID, issuedAt: old
                ).requestBody(signedWith: stack.key).utf8))
        #expect(expired.status == 401 && expired.jsonFields["error"] == "token_expired")
        #expect(try stack.post(Array(#"{"payload":"a.b.c"}"#.utf8)).status == 400)

        let lines = try Self.metricLines(stack)
        let after = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(Self.value(lines, #"siwa_client_notifications_total{client_id="com.example.app"}"#) == 1)
        #expect(Self.value(lines, #"siwa_client_notifications_total{client_id="com.example.watch"}"#) == 0)
        #expect(Self.value(lines, #"siwa_client_refusals_total{client_id="unlisted",reason="aud"}"#) == 1)
        #expect(Self.value(lines, #"siwa_client_refusals_total{client_id="com.example.app",reason="signature"}"#) == 1)
        #expect(Self.value(lines, #"siwa_client_refusals_total{client_id="com.example.app",reason="expired"}"#) == 1)
        #expect(Self.value(lines, #"siwa_client_refusals_total{client_id="none",reason="malformed"}"#) == 1)
        #expect(Self.value(lines, #"siwa_client_refusals_total{client_id="com.example.app",reason="aud"}"#) == 0)
        #expect(Self.value(lines, #"siwa_client_silence_alert_seconds{client_id="com.example.app"}"#) == 604_800)
        #expect(Self.value(lines, #"siwa_client_silence_alert_seconds{client_id="com.example.watch"}"#) == 86_400)
        let last = try #require(
            Self.value(lines, #"siwa_client_last_notification_timestamp_seconds{client_id="com.example.app"}"#))
        #expect(Double(before) / 1000 <= last && last <= Double(after) / 1000)
        #expect(
            !lines.contains {
                $0.hasPrefix(#"siwa_client_last_notification_timestamp_seconds{client_id="com.example.watch"}"#)
            })
        // The refused aud's text is nowhere in the metrics: labels stay bounded.
        #expect(!lines.contains { $0.contains("com.other.secret-name") })
        #expect(lines.filter { $0.hasPrefix("siwa_client_refusals_total{") }.count == 4 * 7)

        // `status`: the refusals by reason, and the unlisted aud as a deployment problem.
        let status = try CommandRun.endpoint(["status", "--socket", stack.socketPath])
        let appRow = try #require(status.lines.first { $0.hasPrefix("client com.example.app ") })
        #expect(appRow.hasSuffix("; alert after 7 d 0 h; refused: expired 1, signature 1"))
        let watchRow = try #require(status.lines.first { $0.hasPrefix("client com.example.watch ") })
        #expect(watchRow.hasSuffix("; alert after 24 h 0 min; refused: none"))
        #expect(
            status.lines.contains {
                $0.hasPrefix("aud not listed ")
                    && $0.hasSuffix(
                        " 1 Apple-signed notifications REFUSED for a client ID not in SIWA_CLIENT_IDS (a Services ID missing there? the log's aud_not_served lines name it)"
                    )
            })

        // The last time went to Redis, and both client IDs are marked served.
        let recorded = try stack.redisConnection().command("HGETALL", "siwa:clients").fieldMap ?? [:]
        let recordedLast = try #require(recorded["last_notification:com.example.app"].flatMap { Int64($0) })
        #expect(before <= recordedLast && recordedLast <= after)
        #expect(recorded["served_since:com.example.watch"].flatMap { Int64($0) }.map { $0 <= after } == true)
        #expect(recorded.count == 3)
    }

    @Test("a restart keeps the silence: the last time and the serving start are read back from Redis")
    func silenceSurvivesARestart() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        _ = try stack.redisConnection().command(
            "HSET", "siwa:clients", "last_notification:com.example.app", String(now - 10 * 86_400_000),
            "served_since:com.example.app", String(now - 30 * 86_400_000), "served_since:com.example.watch",
            String(now - 3 * 86_400_000))
        try stack.startServe()
        // The loader reads P:clients on its own thread once Redis answers: wait for it.
        var lines: [String] = []
        #expect(
            try stack.waitUntil(timeout: 20) {
                lines = try Self.metricLines(stack)
                return (Self.value(lines, #"siwa_client_silence_seconds{client_id="com.example.app"}"#) ?? 0) >= 864_000
            })
        let app = try #require(Self.value(lines, #"siwa_client_silence_seconds{client_id="com.example.app"}"#))
        let watch = try #require(Self.value(lines, #"siwa_client_silence_seconds{client_id="com.example.watch"}"#))
        #expect(864_000 <= app && app < 864_000 + 120)
        #expect(259_200 <= watch && watch < 259_200 + 120)

        // `status` shows the same figures, the silent client ID called so.
        let status = try CommandRun.endpoint(["status", "--socket", stack.socketPath])
        #expect(status.status == 0, "\(status.errors)")
        let appRow = try #require(status.lines.first { $0.hasPrefix("client com.example.app ") })
        #expect(appRow.contains("0 genuine since start; last ") && appRow.contains("(10 d 0 h ago)"))
        #expect(appRow.hasSuffix("; SILENT longer than 7 d 0 h; refused: none"))
        let watchRow = try #require(status.lines.first { $0.hasPrefix("client com.example.watch ") })
        #expect(
            watchRow.hasSuffix(
                "0 genuine since start; none yet (served for 3 d 0 h); alert after 7 d 0 h; refused: none"))

        // A genuine one now: the silence starts again, and Redis keeps the later time.
        #expect(
            try stack.post(try stack.body(type: "email-disabled", sub: "000028.b.0001", email: "x@example.com")).status
                == 200)
        let again = try Self.metricLines(stack)
        #expect(try #require(Self.value(again, #"siwa_client_silence_seconds{client_id="com.example.app"}"#)) < 120)
        let stored = try stack.redisConnection().command("HGET", "siwa:clients", "last_notification:com.example.app")
        #expect(stored.string.flatMap { Int64($0) }.map { $0 >= now } == true)
    }

    @Test("SIWA_SILENCE_ALERT_HOURS_BY_CLIENT naming a client ID not served is refused, naming the setting")
    func overrideForAnUnservedClientIsRefused() throws {
        let run = try CommandRun.endpoint(
            ["serve", "--check"],
            environment: [
                "SIWA_CLIENT_IDS": "com.example.app", "SIWA_SILENCE_ALERT_HOURS_BY_CLIENT": "com.example.other=24",
            ])
        #expect(run.status == 2)
        #expect(run.errors.contains(#""setting":"SIWA_SILENCE_ALERT_HOURS_BY_CLIENT""#))
        #expect(run.errors.contains("com.example.other"))
        #expect(run.output.isEmpty)
    }
}
