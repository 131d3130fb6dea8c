import Foundation
import SIWACrypto
import SIWAStore
import SIWAWebhooks
import Testing

/// The signing of Standard Webhooks 1.0 against the specification's own test vectors, the
/// body's exact bytes, the `webhook-id` escaping and the key file rules, in process.
@Suite struct WebhookSigningTests {
    /// The vectors of the Standard Webhooks reference libraries (their sign tests).
    static let vectorID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
    static let vectorTimestamp: Int64 = 1_614_265_330
    static let vectorBody = Array(#"{"test": 2432232314}"#.utf8)

    @Test("v1 (HMAC-SHA256, whsec_) gives the specification's signature")
    func hmacVector() throws {
        let key = try WebhookSigningKey(text: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n")
        let message = WebhookMessage(id: Self.vectorID, body: Self.vectorBody)
        #expect(
            try message.signatureHeader(timestamp: Self.vectorTimestamp, keys: [key])
                == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    @Test("v1a (ed25519, whsk_ = the base64 of the 32-byte seed) gives the specification's signature")
    func ed25519Vector() throws {
        let key = try WebhookSigningKey(text: "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=")
        let message = WebhookMessage(id: Self.vectorID, body: Self.vectorBody)
        #expect(
            try message.signatureHeader(timestamp: Self.vectorTimestamp, keys: [key])
                == "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==")
    }

    @Test("a rotation: one signature per key, space-separated, in the order of the key files")
    func rotation() throws {
        let hmac = try WebhookSigningKey(text: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let ed25519 = try WebhookSigningKey(text: "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=")
        let header = try WebhookMessage(id: Self.vectorID, body: Self.vectorBody)
            .signatureHeader(timestamp: Self.vectorTimestamp, keys: [ed25519, hmac])
        #expect(
            header
                == "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag== "
                + "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    @Test("a malformed key is refused by name: wrong prefix, bad base64, a short secret, a short seed")
    func malformedKeys() {
        for text in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_" + Data(count: 16).base64EncodedString(),
            "whsk_" + Data(count: 31).base64EncodedString(), "whpk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=",
        ] {
            #expect(throws: WebhookSettingError.self, "\(text) accepted") { try WebhookSigningKey(text: text) }
        }
    }

    @Test("the whpk_ public key of the vector's seed is the base64 of ed25519's 32-byte public key")
    func publicKey() throws {
        let key = try WebhookSigningKey(text: "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=")
        let text = try #require(try key.publicKeyText())
        #expect(text.hasPrefix("whpk_"))
        #expect(Data(base64Encoded: String(text.dropFirst(5)))?.count == 32)
        #expect(try WebhookSigningKey(text: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").publicKeyText() == nil)
    }

    @Test("the body: compact JSON, members in the documented order; the address only in an email event")
    func body() {
        let revoked = WebhookEvent(
            entryID: "1764910800200-0", clientID: "com.example.app", subject: "001234.abc", type: "consent-revoked",
            rawType: "consent-revoked", eventTime: 1_764_910_800_123, tokenID: "jti-1")
        #expect(
            String(
                decoding: WebhookMessage(event: revoked, email: WebhookEmail(address: "a@b.c", isPrivate: true)).body,
                as: UTF8.self)
                == #"{"type":"siwa.consent-revoked","timestamp":"2025-12-05T05:00:00.123Z","version":1,"data":{"client_id":"com.example.app","sub":"001234.abc","event_type":"consent-revoked","raw_type":"consent-revoked","event_time":1764910800123}}"#
        )
        let enabled = WebhookEvent(
            entryID: "1-0", clientID: "com.example.app", subject: "s", type: "email-enabled", rawType: "email-enabled",
            eventTime: 5, tokenID: "j")
        #expect(
            String(
                decoding: WebhookMessage(
                    event: enabled, email: WebhookEmail(address: "x@privaterelay.appleid.com", isPrivate: true)
                )
                .body, as: UTF8.self)
                == #"{"type":"siwa.email-enabled","timestamp":"1970-01-01T00:00:00.005Z","version":1,"data":{"client_id":"com.example.app","sub":"s","event_type":"email-enabled","raw_type":"email-enabled","event_time":5,"email":"x@privaterelay.appleid.com","is_private_email":true}}"#
        )
        #expect(
            String(decoding: WebhookMessage(event: enabled, email: nil).body, as: UTF8.self)
                == #"{"type":"siwa.email-enabled","timestamp":"1970-01-01T00:00:00.005Z","version":1,"data":{"client_id":"com.example.app","sub":"s","event_type":"email-enabled","raw_type":"email-enabled","event_time":5}}"#
        )
    }

    @Test("webhook-id: the jti itself, with %, . and bytes outside printable ASCII percent-encoded")
    func webhookID() {
        #expect(WebhookMessage.webhookID("Fh2kXrxZ_2Q-uo0CFgbTnA") == "Fh2kXrxZ_2Q-uo0CFgbTnA")
        #expect(WebhookMessage.webhookID("a.b%c d") == "a%2Eb%25c%20d")
        #expect(WebhookMessage.webhookID("é") == "%C3%A9")
    }

    @Test("a key file must be the service user's alone (0600 or 0400), a regular file, not a link")
    func keyFileRules() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("wh-keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("billing.key").path
        try "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n".write(toFile: path, atomically: false, encoding: .utf8)
        for mode in [0o600, 0o400] {
            chmod(path, mode_t(mode))
            guard case .hmac = try WebhookSigningKey.load(file: path) else {
                Issue.record("mode \(String(mode, radix: 8)) not read as an HMAC key")
                return
            }
        }
        for mode in [0o640, 0o644, 0o604, 0o700] {
            chmod(path, mode_t(mode))
            let error = #expect(throws: WebhookSettingError.self) { try WebhookSigningKey.load(file: path) }
            #expect(error?.message.contains("has mode \(String(mode, radix: 8))") == true)
        }
        chmod(path, 0o600)
        let link = directory.appendingPathComponent("link.key").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        #expect(throws: WebhookSettingError.self) { try WebhookSigningKey.load(file: link) }
    }
}
