import Foundation
import Glibc
import SIWAJSON
import Testing

/// The real `siwa-endpoint deliver` against real HTTPS receivers on loopback and a real
/// redis-server: what arrives, how many times, with which webhook-id, what stays pending,
/// what the metrics say. The retry schedule runs at SIWA_WEBHOOK_RETRY_SCALE (milliseconds).
@Suite("Webhook delivery", .serialized)
struct WebhookDeliveryTests {
    static func string(_ record: [String: JSONValue], _ key: String) -> String? {
        if case .string(let text)? = record[key] { return text }
        return nil
    }

    static func flag(_ record: [String: JSONValue], _ key: String) -> Bool? {
        if case .bool(let value)? = record[key] { return value }
        return nil
    }

    @Test("both schemes during a rotation: the reference verifier accepts each delivery and refuses a changed byte")
    func signedDeliveries() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let billing = try stack.receiver("billing")
        let mail = try stack.receiver("mail")
        let environment = try stack.environment([
            stack.destination("billing", billing, extra: [("include_email", .bool(true))]),
            // No include_email: the default, no address.
            stack.destination(
                "mail", mail, keys: [stack.hmacKeyPath], extra: [("types", .array([.string("email-enabled")]))]),
        ])
        let deliverer = try stack.startDeliverer(environment)
        try stack.add("consent-revoked", jti: "jti-revoked", eventTime: 1_764_910_800_123)
        try stack.add(
            "email-enabled", jti: "jti-email", subject: "001234.mail", email: "x@privaterelay.appleid.com",
            eventTime: 1_764_910_800_200)
        try stack.add("account-deleted", jti: "jti-deleted", eventTime: 1_764_910_800_300)
        try stack.add("brand-new-type", jti: "jti.unknown", eventTime: 1_764_910_800_400)
        #expect(waitUntil(timeout: 10) { billing.ids().count == 4 && mail.ids().count == 1 })

        #expect(Set(billing.ids()) == ["jti-revoked", "jti-email", "jti-deleted", "jti%2Eunknown"])
        #expect(billing.ids().count == 4)
        for record in billing.records() {
            #expect(Self.flag(record, "v1") == true, "v1 refused: \(record)")
            #expect(Self.flag(record, "v1a") == true, "v1a refused: \(record)")
            #expect(Self.flag(record, "tampered_v1") == false)
            #expect(Self.flag(record, "tampered_v1a") == false)
            #expect(Self.string(record, "content_type") == "application/json")
            #expect(Self.string(record, "user_agent")?.hasPrefix("siwa-endpoint/") == true)
            // One signature per key, in the order of the key files: ed25519, then HMAC.
            let signatures = Self.string(record, "signature")?.split(separator: " ") ?? []
            #expect(signatures.count == 2 && signatures[0].hasPrefix("v1a,") && signatures[1].hasPrefix("v1,"))
        }
        let email = try #require(billing.records().first { Self.string($0, "id") == "jti-email" })
        #expect(
            Self.string(email, "body")
                == #"{"type":"siwa.email-enabled","timestamp":"2025-12-05T05:00:00.200Z","version":1,"data":{"client_id":"com.example.app","sub":"001234.mail","event_type":"email-enabled","raw_type":"email-enabled","event_time":1764910800200,"email":"x@privaterelay.appleid.com","is_private_email":true}}"#
        )
        let unknown = try #require(billing.records().first { Self.string($0, "id") == "jti%2Eunknown" })
        #expect(Self.string(unknown, "body")?.contains(#""type":"siwa.unknown""#) == true)
        #expect(Self.string(unknown, "body")?.contains(#""raw_type":"brand-new-type""#) == true)
        // The second destination: only its type, no address, HMAC alone.
        let mailRecord = try #require(mail.records().first)
        #expect(Self.string(mailRecord, "id") == "jti-email")
        #expect(Self.string(mailRecord, "body")?.contains("email\":") == false)
        #expect(Self.string(mailRecord, "signature")?.hasPrefix("v1,") == true)
        #expect(Self.string(mailRecord, "signature")?.contains(" ") == false)
        // Nothing pending anywhere, the deletion acknowledged on the deletions stream too.
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:billing")) == 0 })
        // The mail receiver logs the request before it answers: wait for the acknowledgement.
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:mail")) == 0 })
        #expect(try stack.pending("deliver:billing", stream: "siwa:deletions") == 0)
        // The worker counts a delivery just after its XACK: wait for the count too.
        #expect(
            waitUntil(timeout: 5) {
                let counted = try? deliverer.metrics()
                return counted?[#"siwa_webhook_delivered_total{destination="billing"}"#] == 4
                    && counted?[#"siwa_webhook_delivered_total{destination="mail"}"#] == 1
            })
        let metrics = try deliverer.metrics()
        #expect(metrics[#"siwa_webhook_delivered_total{destination="billing"}"#] == 4)
        #expect(metrics[#"siwa_webhook_attempts_total{destination="billing"}"#] == 4)
        #expect(metrics[#"siwa_webhook_delivered_total{destination="mail"}"#] == 1)
        #expect(metrics[#"siwa_webhook_delivery_seconds_count{destination="billing"}"#] == 4)
        #expect(metrics["siwa_webhook_deliverer_up"] == 1)
        deliverer.kill(SIGTERM)
        #expect(deliverer.process.terminationStatus == 0)
        #expect(!deliverer.errorText().contains("privaterelay"), "an address in a log line")
    }

    static func cause(_ metrics: [String: Double], _ destination: String, _ cause: String) -> Double? {
        metrics[#"siwa_webhook_failed_attempts_total{destination=""# + destination + #"",cause=""# + cause + #""}"#]
    }

    @Test(
        "500, 429 with Retry-After, a redirect, a hang past the timeout, a close mid-answer: each retried, then delivered"
    )
    func failuresRetried() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("flaky")
        let ok: [String: JSONValue] = ["status": .integer(200)]
        try receiver.plan(
            default: ok,
            byID: [
                "e-500": [["status": .integer(500)], ok],
                "e-429": [["status": .integer(429), "retry_after": .string("1")], ok],
                "e-302": [["status": .integer(302), "location": .string("https://localhost:1/elsewhere")], ok],
                "e-hang": [["hang": .number(5)], ok],
                "e-close": [["close": .bool(true)], ok],
                "e-404": [["status": .integer(404)], ok],
            ])
        let deliverer = try stack.startDeliverer(
            try stack.environment([stack.destination("flaky", receiver)], ["SIWA_WEBHOOK_TIMEOUT_MS": "2500"]))
        let ids = ["e-500", "e-429", "e-302", "e-hang", "e-close", "e-404"]
        for id in ids { try stack.add("consent-revoked", jti: id) }
        #expect(waitUntil(timeout: 20) { ids.allSatisfy { receiver.count($0) == 2 } })
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:flaky")) == 0 })
        // Each exactly twice (the failure, then the 2xx), with its own id both times.
        for id in ids { #expect(receiver.count(id) == 2, "\(id)") }
        #expect(receiver.ids().count == 12)
        // Retry-After: 1 honoured, although the scaled schedule would retry after 5 ms.
        let times = receiver.records().filter { Self.string($0, "id") == "e-429" }.compactMap { record -> Int64? in
            if case .integer(let value)? = record["received_ms"] { return value }
            return nil
        }
        #expect(times.count == 2 && times[1] - times[0] >= 1000, "\(times)")
        // The worker counts a delivery just after its XACK: wait for the count too.
        #expect(
            waitUntil(timeout: 5) {
                (try? deliverer.metrics())?[#"siwa_webhook_delivered_total{destination="flaky"}"#] == 6
            })
        let metrics = try deliverer.metrics()
        #expect(Self.cause(metrics, "flaky", "server_error") == 1)
        #expect(Self.cause(metrics, "flaky", "slow_down") == 1)
        #expect(Self.cause(metrics, "flaky", "redirect") == 1)
        #expect(Self.cause(metrics, "flaky", "timeout") == 1)
        #expect(Self.cause(metrics, "flaky", "connect") == 1)
        #expect(Self.cause(metrics, "flaky", "client_error") == 1)
        #expect(metrics[#"siwa_webhook_delivered_total{destination="flaky"}"#] == 6)
        #expect(metrics[#"siwa_webhook_attempts_total{destination="flaky"}"#] == 12)
        #expect(deliverer.lines().filter { $0.contains(#""event":"webhook_attempt_failed""#) }.count == 6)
        // No redirect was followed: every request reached the one path.
        #expect(receiver.records().allSatisfy { Self.string($0, "path") == "/hook" })
    }

    @Test("410 disables the destination (status, metric, log) until deliver enable; then everything arrives")
    func goneDisables() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("gone")
        try receiver.plan(
            default: ["status": .integer(200)], byID: ["g-1": [["status": .integer(410)], ["status": .integer(200)]]])
        let environment = try stack.environment([stack.destination("gone", receiver)])
        let deliverer = try stack.startDeliverer(environment)
        try stack.add("consent-revoked", jti: "g-1")
        #expect(
            waitUntil(timeout: 10) {
                (try? deliverer.metrics()[#"siwa_webhook_destination_disabled{destination="gone"}"#]) == 1
            })
        try stack.add("consent-revoked", jti: "g-2")
        let status = try CommandRun.endpoint(["deliver", "status", "--json"], environment: environment)
        #expect(status.status == 0)
        #expect(status.output.contains(#""disabled":true"#), "\(status.output)")
        #expect(status.output.contains(#""disabled_reason":"410 Gone""#))
        #expect(status.output.contains(#""last_failure_cause":"gone""#))
        #expect(deliverer.lines().contains { $0.contains(#""event":"webhook_destination_disabled""#) })
        // Disabled: g-2 waits (pending), g-1 was tried once.
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:gone")) == 2 })
        #expect(receiver.ids() == ["g-1"])
        let enable = try CommandRun.endpoint(["deliver", "enable", "--destination", "gone"], environment: environment)
        #expect(enable.status == 0 && enable.output.contains("gone: enabled"))
        #expect(waitUntil(timeout: 10) { receiver.count("g-1") == 2 && receiver.count("g-2") == 1 })
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:gone")) == 0 })
        #expect(
            waitUntil(timeout: 5) {
                (try? deliverer.metrics()[#"siwa_webhook_destination_disabled{destination="gone"}"#]) == 0
            })
        #expect(receiver.ids().count == 3)
        #expect(Self.cause(try deliverer.metrics(), "gone", "gone") == 1)
    }

    @Test("after the last retry the event is kept as failed, then acknowledged; the destination is flagged")
    func exhausted() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("down")
        try receiver.plan(default: ["status": .integer(503)])
        let environment = try stack.environment(
            [stack.destination("down", receiver)], ["SIWA_WEBHOOK_RETRY_SCALE": "0.00001"])
        let deliverer = try stack.startDeliverer(environment)
        try stack.add("consent-revoked", jti: "x-1")
        #expect(
            waitUntil(timeout: 20) {
                (try? deliverer.metrics()[#"siwa_webhook_exhausted_total{destination="down"}"#]) == 1
            })
        #expect(receiver.count("x-1") == 10)
        #expect(try stack.pending("deliver:down") == 0)
        let failed = try stack.test.command("XRANGE", "siwa:deliver:down:failed", "-", "+").array ?? []
        #expect(failed.count == 1)
        #expect(try stack.test.command("HGET", "siwa:deliver:down:state", "exhausted").string == "1")
        #expect(try stack.test.command("HLEN", "siwa:deliver:down:retry").integer == 0)
        let status = try CommandRun.endpoint(["deliver", "status"], environment: environment)
        #expect(status.output.contains("failed_after_retries=1"), "\(status.output)")
        #expect(deliverer.lines().contains { $0.contains(#""event":"webhook_exhausted""#) })
        #expect(Self.cause(try deliverer.metrics(), "down", "slow_down") == 10)
    }

    @Test("a host that resolves to a private address is refused at connect time unless allowed; deliver test")
    func privateAddressRefused() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("inside")
        let environment = try stack.environment([
            stack.destination("inside", receiver, extra: [("allow_private_address", .bool(false))]),
            stack.destination("allowed", receiver),
        ])
        let refused = try CommandRun.endpoint(["deliver", "test", "--destination", "inside"], environment: environment)
        #expect(refused.status == 1)
        #expect(refused.output.contains("failed: refused_address"), "\(refused.output)")
        #expect(receiver.ids().isEmpty)
        let sent = try CommandRun.endpoint(["deliver", "test", "--destination", "allowed"], environment: environment)
        #expect(sent.status == 0, "\(sent.output) \(sent.errors)")
        #expect(sent.output.contains("delivered, HTTP 200"))
        let record = try #require(receiver.records().first)
        #expect(Self.string(record, "body")?.hasPrefix(#"{"type":"siwa.test","#) == true)
        #expect(Self.flag(record, "v1") == true && Self.flag(record, "v1a") == true)
        #expect(receiver.ids().count == 1)
        // The service refuses the same way, attempt after attempt.
        let deliverer = try stack.startDeliverer(environment)
        try stack.add("consent-revoked", jti: "p-1")
        #expect(
            waitUntil(timeout: 10) {
                (Self.cause((try? deliverer.metrics()) ?? [:], "inside", "refused_address") ?? 0) >= 2
            })
        #expect(waitUntil(timeout: 10) { receiver.count("p-1") == 1 })
        #expect(receiver.ids().count == 2)
        #expect(try stack.pending("deliver:inside") == 1)
    }

    @Test("SIGKILLed while posting: the event arrives again, with the same webhook-id, through another deliverer")
    func killedWhilePosting() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("k")
        try receiver.plan(
            default: ["status": .integer(200)], byID: ["k-1": [["hang": .number(5)], ["status": .integer(200)]]])
        let environment = try stack.environment(
            [stack.destination("k", receiver)],
            ["SIWA_WEBHOOK_CLAIM_IDLE_MS": "1000", "SIWA_WEBHOOK_TIMEOUT_MS": "10000"])
        let first = try stack.startDeliverer(environment.merging(["SIWA_WEBHOOK_CONSUMER": "first"]) { $1 })
        try stack.add("consent-revoked", jti: "k-1")
        #expect(waitUntil(timeout: 10) { receiver.count("k-1") == 1 })
        first.kill(SIGKILL)
        #expect(try stack.pending("deliver:k") == 1)
        _ = try stack.startDeliverer(
            environment.merging([
                "SIWA_WEBHOOK_CONSUMER": "second",
                "SIWA_WEBHOOK_METRICS_LISTEN": "127.0.0.1:\(try LoopbackPort.free())",
            ]) { $1 })
        #expect(waitUntil(timeout: 15) { receiver.count("k-1") == 2 })
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:k")) == 0 })
        #expect(receiver.ids() == ["k-1", "k-1"])
    }

    @Test("two deliverers at once: each event once per destination; a slow destination delays no other")
    func sharedAndIndependent() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let fast = try stack.receiver("fast")
        let slow = try stack.receiver("slow")
        try slow.plan(default: ["status": .integer(200), "hang": .number(10)])
        let environment = try stack.environment(
            [stack.destination("fast", fast), stack.destination("slow", slow)], ["SIWA_WEBHOOK_TIMEOUT_MS": "20000"])
        let one = try stack.startDeliverer(environment.merging(["SIWA_WEBHOOK_CONSUMER": "one"]) { $1 })
        let two = try stack.startDeliverer(
            environment.merging([
                "SIWA_WEBHOOK_CONSUMER": "two", "SIWA_WEBHOOK_METRICS_LISTEN": "127.0.0.1:\(try LoopbackPort.free())",
            ]) { $1 })
        let ids = (1...20).map { "s-\($0)" }
        for id in ids { try stack.add("consent-revoked", jti: id) }
        #expect(waitUntil(timeout: 10) { fast.ids().count == 20 })
        // The slow one (10 s per call, two deliverers) has had at most a few meanwhile: one
        // each within those 10 s, two each had the fast one taken twice as long.
        #expect(slow.ids().count <= 4, "\(slow.ids())")
        #expect(Set(fast.ids()) == Set(ids) && fast.ids().count == 20)
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:fast")) == 0 })
        // Each worker counts a delivery just after its XACK: wait for the sum.
        func delivered() -> Double {
            ((try? one.metrics())?[#"siwa_webhook_delivered_total{destination="fast"}"#] ?? 0)
                + ((try? two.metrics())?[#"siwa_webhook_delivered_total{destination="fast"}"#] ?? 0)
        }
        #expect(waitUntil(timeout: 5) { delivered() == 20 }, "delivered: \(delivered())")
    }

    @Test("trimming never drops what a destination has not had: SIWA_STREAM_MAXLEN exceeded while it is down")
    func trimmingWaits() throws {
        let stack = try WebhookStack(streamMaximumLength: 1000)
        defer { stack.shutdown() }
        let receiver = try stack.receiver("t")
        // The group as the deliverer makes it, then the deliverer is not running (the destination is down).
        _ = try stack.test.command("XGROUP", "CREATE", "siwa:events", "deliver:t", "$", "MKSTREAM")
        var wanted: [String] = []
        for index in 1...1100 {
            if index % 100 == 0 {
                wanted.append(try stack.add("consent-revoked", jti: "t-\(index)"))
            } else {
                try stack.add("email-disabled", jti: "t-\(index)")
            }
        }
        #expect(try stack.test.command("XLEN", "siwa:events").integer == 1100)
        let first = try stack.test.command("XRANGE", "siwa:events", "-", "+", "COUNT", "1").array?.first?.array?[1]
            .fieldMap
        #expect(first?["jti"] == "t-1")
        let environment = try stack.environment([
            stack.destination("t", receiver, extra: [("types", .array([.string("consent-revoked")]))])
        ])
        _ = try stack.startDeliverer(environment)
        #expect(waitUntil(timeout: 20) { (try? stack.pending("deliver:t")) == 0 })
        #expect(receiver.ids() == wanted)
        // Caught up: the next notifications trim to the maximum again.
        for index in 1101...1110 { try stack.add("email-disabled", jti: "t-\(index)") }
        let length = try #require(try stack.test.command("XLEN", "siwa:events").integer)
        #expect(length <= 1001, "\(length)")
    }

    @Test("without a delivery group the stream is trimmed as before (the control of the test above)")
    func trimmingWithoutGroup() throws {
        let stack = try WebhookStack(streamMaximumLength: 1000)
        defer { stack.shutdown() }
        for index in 1...1100 { try stack.add("email-disabled", jti: "c-\(index)") }
        let first = try stack.test.command("XRANGE", "siwa:events", "-", "+", "COUNT", "1").array?.first?.array?[1]
            .fieldMap
        #expect(first?["jti"] != "c-1")
        #expect((try stack.test.command("XLEN", "siwa:events").integer ?? 0) < 1100)
    }

    @Test("replay by time range: the same webhook-ids again, only the range and the type asked")
    func replay() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("r")
        let environment = try stack.environment([stack.destination("r", receiver)])
        let deliverer = try stack.startDeliverer(environment)
        try stack.add("consent-revoked", jti: "r-1")
        #expect(waitUntil(timeout: 10) { receiver.count("r-1") == 1 })
        let since = Int64(Date().timeIntervalSince1970 * 1000) + 1
        #expect(waitUntil(timeout: 2) { Int64(Date().timeIntervalSince1970 * 1000) > since })
        try stack.add("consent-revoked", jti: "r-2")
        try stack.add("account-deleted", jti: "r-3", subject: "other")
        #expect(waitUntil(timeout: 10) { receiver.ids().count == 3 })
        let until = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(waitUntil(timeout: 2) { Int64(Date().timeIntervalSince1970 * 1000) > until })
        try stack.add("consent-revoked", jti: "r-4")
        #expect(waitUntil(timeout: 10) { receiver.ids().count == 4 })
        deliverer.kill(SIGTERM)
        let replay = try CommandRun.endpoint(
            ["deliver", "replay", "--destination", "r", "--since", String(since), "--until", String(until)],
            environment: environment)
        #expect(replay.status == 0, "\(replay.output) \(replay.errors)")
        #expect(replay.output.contains("r: replayed 2, delivered 2, failed 0"))
        #expect(receiver.ids() == ["r-1", "r-2", "r-3", "r-4", "r-2", "r-3"])
        let typed = try CommandRun.endpoint(
            ["deliver", "replay", "--destination", "r", "--since", String(since), "--type", "account-deleted"],
            environment: environment)
        #expect(typed.status == 0)
        #expect(receiver.ids().suffix(1) == ["r-3"] && receiver.ids().count == 7)
    }

    @Test("deletions shows a webhook destination that has not acknowledged an account-deleted, until its 2xx")
    func deletionsShowsDestination() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("d")
        try receiver.plan(default: ["status": .integer(500)])
        let environment = try stack.environment(
            [stack.destination("d", receiver)], ["SIWA_WEBHOOK_RETRY_SCALE": "0.01"])
        _ = try stack.startDeliverer(environment)
        try stack.add("account-deleted", jti: "d-1")
        #expect(waitUntil(timeout: 10) { receiver.count("d-1") >= 1 })
        let waiting = try CommandRun.endpoint(["deletions", "--json", "--older-than", "0s"], environment: environment)
        #expect(waiting.status == 1, "\(waiting.output)")
        #expect(waiting.output.contains(#""group":"deliver:d""#))
        #expect(waiting.output.contains(#""pending":1"#), "\(waiting.output)")
        try receiver.plan(default: ["status": .integer(200)])
        #expect(waitUntil(timeout: 20) { (try? stack.pending("deliver:d", stream: "siwa:deletions")) == 0 })
        let done = try CommandRun.endpoint(["deletions", "--json", "--older-than", "0s"], environment: environment)
        #expect(done.status == 0, "\(done.output)")
        #expect(done.output.contains(#""pending":0"#))
    }

    @Test("a certificate the destination's CA (or the system store) does not trust: failed tls, nothing sent")
    func untrustedCertificate() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let receiver = try stack.receiver("tls")
        let destination = stack.destination("tls", receiver)
        guard case .object(var members) = destination else { return }
        members["ca_file"] = nil
        let environment = try stack.environment([.object(members)])
        let run = try CommandRun.endpoint(["deliver", "test", "--destination", "tls"], environment: environment)
        #expect(run.status == 1)
        #expect(run.output.contains("failed: tls"), "\(run.output)")
        #expect(receiver.ids().isEmpty)
    }

    @Test("deliver --check: a key file others can read, an unknown member, plain http: exit 2 naming the setting")
    func checkRefusals() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let good = try stack.environment([stack.destination("ok", nil)])
        let valid = try CommandRun.endpoint(["deliver", "--check"], environment: good)
        #expect(valid.status == 0, "\(valid.errors)")
        #expect(valid.output.contains("1 destination(s) are valid: ok"))
        chmod(stack.hmacKeyPath, 0o644)
        let readable = try CommandRun.endpoint(["deliver", "--check"], environment: good)
        chmod(stack.hmacKeyPath, 0o600)
        #expect(readable.status == 2)
        #expect(readable.errors.contains(#""setting":"SIWA_WEBHOOK_DESTINATIONS""#))
        #expect(readable.errors.contains("has mode 644"), "\(readable.errors)")
        #expect(!readable.errors.contains("whsec_"), "a key in the log")
        for (extra, named) in [
            ([("colour", JSONValue.string("red"))], "unknown member \\\"colour\\\""),
            (
                [("url", .string("http://example.com/hook")), ("allow_private_address", .bool(false))],
                "must be an https URL"
            ),
            ([("types", .array([.string("password-changed")]))], "names password-changed"),
        ] {
            let run = try CommandRun.endpoint(
                ["deliver", "--check"],
                environment: try stack.environment([stack.destination("bad", nil, extra: extra)]))
            #expect(run.status == 2)
            #expect(run.errors.contains(named), "\(run.errors)")
        }
    }
}
