import Foundation
import SIWACrypto
import SIWAJSON
import SIWAStore

/// The body and headers of one Standard Webhooks 1.0 call.
public struct WebhookMessage: Sendable {
    /// `webhook-id`.
    public let id: String
    /// The exact body bytes signed and sent.
    public let body: [UInt8]

    /// The compact JSON body, members in this order: `type`, `timestamp`, `version`, `data`
    /// (`client_id`, `sub`, `event_type`, `raw_type`, `event_time`, then `email` and
    /// `is_private_email` for an email event when the address is given).
    public init(event: WebhookEvent, email: WebhookEmail?, typePrefix: String = "siwa.") {
        id = Self.webhookID(event.tokenID)
        var out: [UInt8] = []
        out.reserveCapacity(320)
        out += #"{"type":"#.utf8
        JSONWriter.writeString(typePrefix + event.type, to: &out)
        out += #","timestamp":"#.utf8
        JSONWriter.writeString(Self.rfc3339(milliseconds: event.eventTime), to: &out)
        out += #","version":1,"data":"#.utf8
        var data: [(String, JSONValue)] = [
            ("client_id", .string(event.clientID)), ("sub", .string(event.subject)),
            ("event_type", .string(event.type)), ("raw_type", .string(event.rawType)),
            ("event_time", .integer(event.eventTime)),
        ]
        if event.isEmailEvent, let email {
            data.append(("email", .string(email.address)))
            if let isPrivate = email.isPrivate { data.append(("is_private_email", .bool(isPrivate))) }
        }
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
    public static func webhookID(_ tokenID: String) -> String {
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
    public func signatureHeader(timestamp: Int64, keys: [WebhookSigningKey]) throws(CryptoError) -> String {
        let content = Array("\(id).\(timestamp).".utf8) + body
        var signatures: [String] = []
        for key in keys { signatures.append(try key.signature(content)) }
        return signatures.joined(separator: " ")
    }

    /// `2026-12-05T05:00:00.123Z`.
    public static func rfc3339(milliseconds: Int64) -> String {
        var seconds = time_t(milliseconds.quotientRoundingDown(1000))
        let fraction = milliseconds - Int64(seconds) * 1000
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let date =
            "\(String(Int(parts.tm_year) + 1900).leftPadded(4))-\(String(parts.tm_mon + 1).leftPadded(2))-"
            + "\(String(parts.tm_mday).leftPadded(2))"
        let time =
            "\(String(parts.tm_hour).leftPadded(2)):\(String(parts.tm_min).leftPadded(2)):"
            + "\(String(parts.tm_sec).leftPadded(2)).\(String(fraction).leftPadded(3))"
        return date + "T" + time + "Z"
    }
}

extension Int64 {
    fileprivate func quotientRoundingDown(_ divisor: Int64) -> Int64 {
        let quotient = self / divisor
        return (self % divisor < 0) ? quotient - 1 : quotient
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
