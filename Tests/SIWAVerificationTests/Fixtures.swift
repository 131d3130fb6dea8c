import SIWACrypto
import SIWAJSON
import SIWATestKit
import SIWAVerification

/// Real RSA test keys made once per test run, and builders for exact token text.
/// Apple's private key cannot be had: these keys stand in for it, and the JWKS
/// built from them stands in for https://appleid.apple.com/auth/keys.
enum Fixtures {
    static let clientID = "com.example.app"
    static let otherServedClientID = "com.example.watch"
    static let now: Int64 = 1_796_000_000
    static let subject = "001234.0123456789abcdef0123456789abcdef.0123"
    static let relayEmail = "ep9ks2tnph@privaterelay.appleid.com"

    static let primary = try! TestSigningKey.generate(keyID: "test-apple-key-1")
    static let secondary = try! TestSigningKey.generate(keyID: "test-apple-key-2")
    static let attacker = try! TestSigningKey.generate(keyID: "attacker-key")

    static let jwksDocument = try! TestSigningKey.jwksDocument([primary, secondary])
    static let keys = try! JSONWebKeySet(jsonBytes: Array(jwksDocument.utf8))
    static let verifier = NotificationVerifier(keys: keys, clientIDs: [clientID, otherServedClientID])

    static func header(kid: String = primary.keyID, alg: String = "RS256") -> String {
        #"{"kid":"\#(kid)","alg":"\#(alg)"}"#
    }

    /// Event JSON text; each argument is raw JSON text, or nil to leave the member out.
    static func event(
        type: String? = #""consent-revoked""#, sub: String? = "\"\(subject)\"",
        // Before every iat the tests use (the oldest is a day and a minute ago): an event
        // cannot be later than the token about it (event_time_in_future).
        eventTime: String? = "\((now - 86_400 - 120) * 1000)", extra: String = ""
    ) -> String {
        var members: [String] = []
        if let type { members.append(#""type":\#(type)"#) }
        if let sub { members.append(#""sub":\#(sub)"#) }
        if !extra.isEmpty { members.append(extra) }
        if let eventTime { members.append(#""event_time":\#(eventTime)"#) }
        return "{" + members.joined(separator: ",") + "}"
    }

    /// The events claim as Apple sends it: a JSON string holding the event object.
    static func eventsString(_ eventJSON: String = event()) -> String {
        JSONWriter.serialize(.string(eventJSON))
    }

    /// Claims JSON text in Apple's real shape; each argument is raw JSON text, or nil to omit.
    static func claims(
        iss: String? = #""https://appleid.apple.com""#, aud: String? = "\"\(clientID)\"",
        exp: String? = "\(now - 100 + 86_400)", iat: String? = "\(now - 100)",
        jti: String? = #""dGVzdC10b2tlbi1pZC0wMQ""#,
        events: String? = eventsString(), extra: String = ""
    ) -> String {
        var members: [String] = []
        if let iss { members.append(#""iss":\#(iss)"#) }
        if let aud { members.append(#""aud":\#(aud)"#) }
        if let exp { members.append(#""exp":\#(exp)"#) }
        if let iat { members.append(#""iat":\#(iat)"#) }
        if let jti { members.append(#""jti":\#(jti)"#) }
        if let events { members.append(#""events":\#(events)"#) }
        if !extra.isEmpty { members.append(extra) }
        return "{" + members.joined(separator: ",") + "}"
    }

    static func token(header: String = header(), claims: String = claims(), key: TestSigningKey = primary) -> String {
        try! CompactJWSSigner.signRS256(header: header, claims: claims, key: key.privateKey)
    }

    static func body(token: String) -> [UInt8] {
        Array(CompactJWSSigner.requestBody(payload: token).utf8)
    }

    static func body(header: String = header(), claims: String = claims(), key: TestSigningKey = primary) -> [UInt8] {
        body(token: token(header: header, claims: claims, key: key))
    }

    static func segments(_ token: String) -> [String] {
        token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    }

    static func b64(_ text: String) -> String { Base64URL.encode(text.utf8) }

    /// The refusal's code, or nil when the body verified.
    static func refusal(
        _ body: [UInt8], verifier: NotificationVerifier = verifier, now: Int64 = now
    ) -> VerificationError? {
        do {
            _ = try verifier.verify(body: body, now: now)
            return nil
        } catch {
            return error
        }
    }
}
