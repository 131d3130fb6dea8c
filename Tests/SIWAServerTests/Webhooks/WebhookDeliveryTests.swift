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
            stack.destination("billing", billing),
            stack.destination(
                "mail", mail, keys: [stack.hmacKeyPath],
                extra: [("types", .array([.string("email-enabled")])), ("include_email", .bool(false))]),
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
        #expect(try stack.pending("deliver:mail") == 0)
        #expect(try stack.pending("deliver:billing", stream: "siwa:deletions") == 0)
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
}
