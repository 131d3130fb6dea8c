import Foundation
import SIWAFastCGI
import SIWAKeys
import SIWARedis
import SIWAResponder
import SIWASettings
import SIWASpool
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWATestKit
import SIWAVerification
import Testing

/// The responder's whole status table, in process: the JWKS fetch, the Redis store are
/// in-process doubles (Apple stood in for by the fetch double's document); the spool is a
/// real one in a temporary directory. The same statuses through nginx, a real Redis and a
/// real process are in `ServeIntegrationTests`.
@Suite("Responder status table (in process)")
final class ResponderStatusTableTests {
    static let now: Int64 = 1_800_000_000
    static let path = "/apple/notifications"

    let directory: URL
    let fetcher = JWKSFetcherDouble()
    let store = NotificationStoreDouble()
    let key: TestSigningKey
    let keys: JWKSProvider
    /// The one clock of the keys and the responder: moved by hand.
    let clock = JWKSTestClock(ResponderStatusTableTests.now - 3600)
    let spool: NotificationSpool
    let responder: NotificationResponder
    /// Runs the responder's circuit breaker (its probe and /healthz's PING), as serve does.
    let services = ServiceGroup()
    /// What the responder logs (its log sink).
    let logged = LoggedLines()

    init() throws {
        directory = try JWKSTestFixtures.temporaryDirectory()
        key = try TestSigningKey.generate(keyID: "test-apple-key")
        fetcher.serve(try JWKSTestFixtures.document([key]))
        keys = JWKSProvider(
            settings: JWKSProvider.Settings(url: "https://jwks.invalid/auth/keys"), fetcher: fetcher,
            clock: clock.endpointClock)
        // The start fetch an hour before the requests: an unknown kid may trigger a fetch.
        keys.start()
        clock.advance(by: 3600)
        let spoolDirectory = directory.appendingPathComponent("spool").path
        // One record per segment: once the directory is gone, the next append must fail.
        spool = try NotificationSpool(directory: spoolDirectory, segmentByteLimit: 1)
        let configuration = try ServerConfiguration(environment: [
            "SIWA_CLIENT_IDS": JWKSTestFixtures.clientID, "SIWA_SPOOL_DIR": spoolDirectory,
            // The probes' PING is answered by the breaker's own thread: 2 s, not 80 ms, so a
            // loaded machine's scheduling never reads as Redis not answering.
            "SIWA_HEALTH_PING_TIMEOUT_MS": "2000",
        ])
        let store = store
        let stores = NotificationStorePool(makeStore: { store })
        // Built as serve's assembly builds them, from the same settings.
        let breaker = RedisCircuitBreaker(
            retryInterval: configuration.redis.circuitRetryInterval, clock: clock.endpointClock
        ) {
            (try? stores.withStore { store throws(RedisError) in store.probe() }) ?? nil
        }
        responder = NotificationResponder(
            configuration: configuration,
            verifier: NotificationVerifier(
                clientIDs: configuration.clientIDs, leewaySeconds: configuration.requests.leeway.wholeSeconds,
                // As serve builds it: the FastCGI server enforces the body limit (`.tooLarge`).
                maximumBodyBytes: .max),
            keys: keys, breaker: breaker, stores: stores, spool: spool, drain: nil, metrics: ServerMetrics(),
            clock: clock.endpointClock, log: logged.sink)
        services.start(breaker)
    }

    deinit {
        services.stop(until: .now + .seconds(10))
        try? FileManager.default.removeItem(at: directory)
    }

    func request(
        _ method: String = "POST", path: String = path, body: FastCGIRequest.Body = .complete([]),
        params: [String: String] = [:]
    ) -> (status: Int, body: String, headers: [String: String]) {
        let response = responder.handle(
            FastCGIRequest(
                params: ["REQUEST_METHOD": method, "DOCUMENT_URI": path].merging(params) { $1 }, body: body))
        var headers: [String: String] = [:]
        for header in response.headers { headers[header.name] = header.value }
        return (response.status, String(decoding: response.body, as: UTF8.self), headers)
    }

    /// The `siwa_requests_total` count /metrics shows for these labels (the log line's
    /// status, outcome and error code are the same values).
    func requestCount(_ status: Int, _ outcome: String, type: String = "consent-revoked", code: String = "") -> String?
    {
        let labels = #"siwa_requests_total{status="\#(status)",outcome="\#(outcome)",type="\#(type)",code="\#(code)"} "#
        return request("GET", path: "/metrics").body.split(separator: "\n").first { $0.hasPrefix(labels) }
            .map { String($0.dropFirst(labels.count)) }
    }

    func post(_ body: [UInt8]) -> (status: Int, body: String, headers: [String: String]) {
        request(body: .complete(body))
    }

    func signed(_ key: TestSigningKey? = nil, audience: String = JWKSTestFixtures.clientID) throws -> [UInt8] {
        try (key ?? self.key).signedBody(audience: audience, issuedAt: Self.now)
    }

    @Test("SIWA_GOOGLE_CLIENT_IDS unset: Google's path is an unknown path (404), whatever is sent")
    func googlePathWithoutGoogle() throws {
        let response = request(
            path: "/google/risc", body: .complete(Array("a.b.c".utf8)),
            params: ["CONTENT_TYPE": "application/secevent+jwt"])
        #expect(response.status == 404)
        #expect(response.body == #"{"status":"not_found"}"#)
        #expect(store.applied.isEmpty)
    }

    @Test("200 for each store outcome, with the store asked once")
    func storeOutcomes() throws {
        for outcome in [NotificationStore.Outcome.applied, .duplicate, .stale, .recorded] {
            store.answer(.outcome(outcome))
            let response = post(try signed())
            #expect(response.status == 200)
            #expect(response.body == #"{"status":"\#(outcome.rawValue)"}"#)
        }
        #expect(store.applied.count == 4)
        #expect(spool.depth == 0)
    }

    @Test("Redis down: 200 spooled, the notification in the spool")
    func spooled() throws {
        store.answer(.down)
        let response = post(try signed())
        #expect(response.status == 200)
        #expect(response.body == #"{"status":"spooled"}"#)
        #expect(spool.depth == 1)
        #expect(store.applied.isEmpty)
    }

    @Test("Redis down and the spool cannot take the record: 503 store_unavailable with Retry-After")
    func storeUnavailable() throws {
        store.answer(.down)
        #expect(post(try signed()).status == 200)
        try FileManager.default.removeItem(atPath: spool.directory)
        let response = post(try signed())
        #expect(response.status == 503)
        #expect(response.body == #"{"error":"store_unavailable","status":"unavailable"}"#)
        #expect(response.headers["Retry-After"] == "30")
        #expect(spool.depth == 1)
        #expect(requestCount(503, "unavailable", code: "store_unavailable") == "1")
        // Through the responder's injected sink: one line, about the spool, no body in it.
        let failed = logged.lines(event: "spool_append_failed")
        #expect(failed.count == 1)
        #expect(failed.first?.contains(#""level":"error""#) == true)
    }

    @Test("replica shortfall: 200 with a spool copy; 503 store_unavailable when the copy cannot be kept")
    func replicaShortfall() throws {
        store.answer(.outcome(.applied, shortfall: true))
        let kept = post(try signed())
        #expect(kept.status == 200)
        #expect(kept.body == #"{"status":"applied"}"#)
        #expect(spool.depth == 1)
        try FileManager.default.removeItem(atPath: spool.directory)
        let lost = post(try signed())
        #expect(lost.status == 503)
        #expect(lost.body == #"{"error":"store_unavailable","status":"unavailable"}"#)
        #expect(requestCount(503, "unavailable", code: "store_unavailable") == "1")
    }

    @Test("refusals: 400, 401, 403, 413, each with its code, the store never asked")
    func refusals() throws {
        let incomplete = request(body: .incomplete)
        #expect(incomplete.status == 400)
        #expect(incomplete.body == #"{"error":"body_incomplete","status":"refused"}"#)
        let notJSON = post(Array("payload=x".utf8))
        #expect(notJSON.status == 400)
        let stranger = post(try signed(try TestSigningKey.generate(keyID: "stranger")))
        #expect(stranger.status == 401)
        #expect(stranger.body == #"{"error":"kid_unknown","status":"refused"}"#)
        let forgery = post(try signed(try TestSigningKey.generate(keyID: key.keyID)))
        #expect(forgery.status == 401)
        #expect(forgery.body == #"{"error":"signature_invalid","status":"refused"}"#)
        let notOurs = post(try signed(audience: "com.example.other"))
        #expect(notOurs.status == 403)
        #expect(notOurs.body == #"{"error":"aud_not_served","status":"refused"}"#)
        let tooLarge = request(body: .tooLarge)
        #expect(tooLarge.status == 413)
        #expect(tooLarge.body == #"{"error":"body_too_large","status":"refused"}"#)
        #expect(store.applied.isEmpty)
        #expect(spool.depth == 0)
        #expect(requestCount(400, "refused", type: "", code: "body_incomplete") == "1")
        #expect(requestCount(401, "refused", type: "", code: "kid_unknown") == "1")
        #expect(requestCount(413, "refused", type: "", code: "body_too_large") == "1")
    }

    @Test("an unknown kid with no fetch possible: 503 keys_unavailable with Retry-After")
    func keysUnavailable() throws {
        fetcher.serve(nil)
        let response = post(try signed(try TestSigningKey.generate(keyID: "stranger")))
        #expect(response.status == 503)
        #expect(response.body == #"{"error":"keys_unavailable","status":"unavailable"}"#)
        #expect(response.headers["Retry-After"] == "30")
        #expect(fetcher.fetchCount == 2)
        #expect(store.applied.isEmpty)
        #expect(requestCount(503, "unavailable", type: "", code: "keys_unavailable") == "1")
    }

    @Test("404 for other paths, 405 with Allow for other methods")
    func routes() {
        let missing = request("GET", path: "/other")
        #expect(missing.status == 404)
        #expect(missing.body == #"{"status":"not_found"}"#)
        let getNotification = request("GET")
        #expect(getNotification.status == 405)
        #expect(getNotification.headers["Allow"] == "POST")
        let postHealth = request("POST", path: "/healthz")
        #expect(postHealth.status == 405)
        #expect(postHealth.headers["Allow"] == "GET, HEAD")
    }

    @Test("/healthz: 200 when keys, store and spool are fine; 503 with the reason when the store is down")
    func health() {
        let healthy = request("GET", path: "/healthz")
        #expect(healthy.status == 200)
        #expect(healthy.body == #"{"status":"ok","keys":1,"redis":"ok","spool_depth":0}"#)
        store.answerPing(false)
        let unhealthy = request("GET", path: "/healthz")
        #expect(unhealthy.status == 503)
        // The failed PING opens the circuit breaker: its members come before the reason.
        #expect(
            unhealthy.body
                == #"{"status":"unavailable","keys":1,"redis":"down","spool_depth":0,"redis_circuit":"open","redis_circuit_open_ms":0,"redis_last_probe":null,"reason":"Redis does not answer"}"#
        )
        #expect(unhealthy.headers["Retry-After"] == "30")
        // How long it has been open counts on the injected monotonic clock.
        clock.advance(by: 2)
        #expect(request("GET", path: "/healthz").body.contains(#""redis_circuit_open_ms":2000,"#))
    }
}
