import Foundation
import Glibc
import SIWAFastCGI
import SIWAJSON
import SIWAKeys
import SIWARedis
import SIWAResponder
import SIWASettings
import SIWASpool
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWATestKit
import SIWATestSupport
import SIWAVerification
import Testing

/// Google's events from the responder to a webhook destination: a SET accepted on
/// `/google/risc` (the responder built as serve builds it, keys fetched over real TLS from the
/// stand-in's configuration document) lands on the events stream of a real redis-server, and
/// the real `siwa-endpoint deliver` sends it to the HTTPS receiver the webhook tests use,
/// with `provider: google`; a destination that names only Apple's types does not receive it.
@Suite("Google's events through the deliverer", .serialized)
struct WebhookGoogleTests {
    static let clientID = "1234567890-abc.apps.googleusercontent.com"
    static let sub = "110248495921238986420"

    /// A responder with Google's receiver, writing to `redisURL`.
    static func responder(redisURL: String, google: GoogleStandIn, spool: URL) throws -> NotificationResponder {
        let configuration = try ServerConfiguration(environment: [
            "SIWA_CLIENT_IDS": "com.example.app", "SIWA_SPOOL_DIR": spool.appendingPathComponent("spool").path,
            "SIWA_JWKS_CACHE": spool.appendingPathComponent("jwks.json").path,
            "SIWA_GOOGLE_CLIENT_IDS": clientID, "SIWA_GOOGLE_RISC_CONFIGURATION_URL": google.configurationURL,
            "SIWA_REDIS_URL": redisURL, "SIWA_WORKERS": "2",
        ])
        let keys = JWKSProvider(settings: configuration.google.keys, fetcher: google.fetcher)
        keys.start()
        let receiver = SecurityEventReceiver(
            settings: configuration.google,
            verifier: SecurityEventVerifier(
                clientIDs: configuration.google.clientIDs, leewaySeconds: configuration.requests.leeway.wholeSeconds),
            keys: keys, startedAt: EndpointClock.system.wallMilliseconds())
        let redisSettings = configuration.redis
        let stores = NotificationStorePool(makeStore: {
            NotificationStore(connection: RedisConnection(endpoint: redisSettings.endpoint))
        })
        // No breaker service: it starts closed, and Redis is up for the whole test.
        let breaker = RedisCircuitBreaker(retryInterval: configuration.redis.circuitRetryInterval) {
            (try? stores.withStore { store throws(RedisError) in store.probe() }) ?? nil
        }
        return NotificationResponder(
            configuration: configuration, verifier: NotificationVerifier(clientIDs: configuration.clientIDs),
            keys: JWKSProvider(
                settings: JWKSProvider.Settings(url: "https://jwks.invalid/auth/keys"), fetcher: JWKSFetcherDouble()),
            breaker: breaker, stores: stores, spool: try NotificationSpool(directory: configuration.spool.directory),
            drain: nil, metrics: ServerMetrics(), google: receiver, log: LoggedLines().sink)
    }

    @Test("a Google SET accepted by the responder reaches a destination naming Google's types, with provider google")
    func googleEventDelivered() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let key = try TestSigningKey.generate(keyID: "google-key-1")
        let google = try GoogleStandIn(keys: [key])
        defer { google.shutdown() }
        let responder = try Self.responder(redisURL: stack.redis.url(), google: google, spool: stack.directory)

        let security = try stack.receiver("security")
        let apple = try stack.receiver("apple")
        let environment = try stack.environment([
            stack.destination(
                "security", security,
                extra: [
                    (
                        "types",
                        .array([
                            .string("google:account-disabled"), .string("google:token-revoked"),
                            .string("consent-revoked"),
                        ])
                    )
                ]),
            // No types: Apple's five, as before Google's events reached the stream.
            stack.destination("apple", apple),
        ])
        let deliverer = try stack.startDeliverer(environment)
        defer { deliverer.kill(SIGTERM) }

        // One SET, two events under one jti: two webhooks, two webhook-ids.
        let issuedAt = Int64(Date().timeIntervalSince1970)
        let claims = TestSecurityEvent.claims(
            audience: .string(Self.clientID), issuedAt: issuedAt, tokenID: "set-1",
            events: [
                (
                    SecurityEventType.accountDisabled.uri,
                    TestSecurityEvent.payload(.accountDisabled, sub: Self.sub, reason: "hijacking")
                ),
                (SecurityEventType.tokenRevoked.uri, TestSecurityEvent.payload(.tokenRevoked, sub: Self.sub)),
            ])
        let response = responder.handle(
            FastCGIRequest(
                params: [
                    "REQUEST_METHOD": "POST", "DOCUMENT_URI": "/google/risc",
                    "CONTENT_TYPE": "application/secevent+jwt",
                ],
                body: .complete(Array(try TestSecurityEvent.signed(claims: claims, key: key).utf8))))
        #expect(response.status == 202)
        try stack.add("consent-revoked", jti: "apple-1", eventTime: 1_764_910_800_123)

        #expect(waitUntil(timeout: 10) { security.ids().count == 3 && apple.ids().count == 1 })
        #expect(
            Set(security.ids()) == ["set-1/account-disabled", "set-1/token-revoked", "apple-1"],
            "\(security.ids())")
        #expect(apple.ids() == ["apple-1"])
        let eventTime = issuedAt * 1000
        let timestamp = UTCTime.format(milliseconds: eventTime)
        let bodies = Dictionary(
            security.records().map {
                (WebhookDeliveryTests.string($0, "id") ?? "", WebhookDeliveryTests.string($0, "body") ?? "")
            },
            uniquingKeysWith: { first, _ in first })
        #expect(
            bodies["set-1/account-disabled"]
                == #"{"type":"siwa.google.account-disabled","timestamp":"\#(timestamp)","version":1,"data":{"provider":"google","client_id":"\#(Self.clientID)","sub":"\#(Self.sub)","event_type":"account-disabled","raw_type":"\#(SecurityEventType.accountDisabled.uri)","event_time":\#(eventTime),"reason":"hijacking"}}"#
        )
        #expect(
            bodies["set-1/token-revoked"]
                == #"{"type":"siwa.google.token-revoked","timestamp":"\#(timestamp)","version":1,"data":{"provider":"google","client_id":"\#(Self.clientID)","sub":"","event_type":"token-revoked","raw_type":"\#(SecurityEventType.tokenRevoked.uri)","event_time":\#(eventTime),"token_type":"refresh_token","token_identifier_alg":"prefix","token":"1/abcdefghijklmn"}}"#
        )
        // Apple's body as version 1 always sent it: no provider member.
        #expect(bodies["apple-1"]?.contains(#""data":{"client_id":"com.example.app""#) == true)
        for record in security.records() {
            #expect(WebhookDeliveryTests.flag(record, "v1") == true, "v1 refused: \(record)")
            #expect(WebhookDeliveryTests.flag(record, "v1a") == true, "v1a refused: \(record)")
        }
        // Both groups read every entry: the Apple destination acknowledged Google's unsent.
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:security")) == 0 })
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:apple")) == 0 })
        #expect(apple.ids() == ["apple-1"])
    }
}
