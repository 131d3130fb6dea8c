import Foundation
import SIWACrypto
import SIWAJSON
import SIWAStore
import SIWASupport

/// The body and headers of one Standard Webhooks 1.0 call.
public struct WebhookMessage: Sendable {
    /// `webhook-id`.
    public let id: String
    /// The exact body bytes signed and sent.
    public let body: [UInt8]

    /// The compact JSON body, members in this order: `type`, `timestamp`, `version`, `data`
    /// (`provider` for Google's only, `client_id`, `sub`, `event_type`, `raw_type`, `event_time`, then `email` and
    /// `is_private_email` for an Apple email event when the address is given, or Google's
    /// `reason`, `state`, `token_type`, `token_identifier_alg`, `token` as the stream holds
    /// them). Google's `type` is `siwa.google.<event_type>`, so no receiver of Apple's types
    /// mistakes one for Apple's.
    public init(event: WebhookEvent, email: WebhookEmail?, typePrefix: String = "siwa.") {
        // One Google SET may carry several events under one jti: the type keeps their IDs
        // apart (a receiver drops a repeated webhook-id as a retry), and the same entry
        // always gives the same ID.
        id = Self.webhookID(event.provider == "google" ? "\(event.tokenID)/\(event.type)" : event.tokenID)
        var out: [UInt8] = []
        out.reserveCapacity(320)
        out += #"{"type":"#.utf8
        let typeName = event.provider == "google" ? "google." + event.type : event.type
        JSONWriter.writeString(typePrefix + typeName, to: &out)
        out += #","timestamp":"#.utf8
        JSONWriter.writeString(UTCTime.format(milliseconds: event.eventTime), to: &out)
        out += #","version":1,"data":"#.utf8
        // Apple's body stays as version 1 has always sent it (receivers that validate the closed
        // schema keep accepting it): no `provider` means Apple. Google's names its provider.
        var data: [(String, JSONValue)] = event.provider == "apple" ? [] : [("provider", .string(event.provider))]
        data += [
            ("client_id", .string(event.clientID)), ("sub", .string(event.subject)),
            ("event_type", .string(event.type)), ("raw_type", .string(event.rawType)),
            ("event_time", .integer(event.eventTime)),
        ]
        if event.isEmailEvent, let email {
            data.append(("email", .string(email.address)))
            if let isPrivate = email.isPrivate { data.append(("is_private_email", .bool(isPrivate))) }
        }
        for (name, value) in event.googleFields { data.append((name, .string(value))) }
        JSONWriter.writeObject(data, to: &out)
        out.append(UInt8(ascii: "}"))
        body = out
    }

    /// A message of a given ID and body (the Standard Webhooks test vectors).
    public init(id: String, body: [UInt8]) {
        self.id = id
        self.body = body
    }

    /// `siwa.test` for `deliver test`: a fresh random ID, now as the time.
    public static func test(now: Int64) throws(CryptoError) -> WebhookMessage {
        let random = try RandomBytes.generate(16).map { String($0, radix: 16).leftPadded(2) }.joined()
        let event = WebhookEvent(
            entryID: "\(now)-0", clientID: "siwa-endpoint.test", subject: "test", type: "test", rawType: "test",
            eventTime: now, tokenID: "test_" + random)
        return WebhookMessage(event: event, email: nil)
    }

    /// `webhook-id` from the jti. Standard Webhooks forbids `.` in it (the signed content is
    /// `id.timestamp.body`), and a header takes printable ASCII only: `%`, `.` and any byte
    /// outside `!`...`~` are percent-encoded (`.` is `%2E`). The same jti always gives the same
    /// ID, so retries and replays carry it unchanged. Apple's jtis need no escaping.
    static func webhookID(_ tokenID: String) -> String {
        var out = ""
        for byte in tokenID.utf8 {
            if byte > 0x20, byte < 0x7F, byte != UInt8(ascii: "."), byte != UInt8(ascii: "%") {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(2)
            }
        }
        return out
    }

    /// The `webhook-signature` value: one signature per key, space-separated, over
    /// `<id>.<timestamp>.<body>`.
    func signatureHeader(timestamp: Int64, keys: [WebhookSigningKey]) throws(CryptoError) -> String {
        let content = Array("\(id).\(timestamp).".utf8) + body
        var signatures: [String] = []
        for key in keys { signatures.append(try key.signature(content)) }
        return signatures.joined(separator: " ")
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
