import Foundation
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

/// Google's path in process, end to end: the responder built as serve builds it, Google's
/// keys and issuer fetched over real TLS from the stand-in's configuration document, every
/// event type and every refusal answered as RFC 8935 says, against a real redis-server.
/// (Through the shipped nginx site: deploy-tests/test_google_site.py.)
@Suite("Google's Cross-Account Protection through the responder")
final class GoogleReceiverTests {
    static let clientID = "1234567890-abc.apps.googleusercontent.com"
    static let sub = "110248495921238986420"
    static let path = "/google/risc"

    let directory: URL
    let redis: RedisServerProcess
    let google: GoogleStandIn
    let key: TestSigningKey
    let responder: NotificationResponder
    let spool: NotificationSpool
    let connection: RedisConnection
    let services = ServiceGroup()
    let logged = LoggedLines()

    init() throws {
        directory = try JWKSTestFixtures.temporaryDirectory()
        key = try TestSigningKey.generate(keyID: "google-key-1")
        redis = try RedisServerProcess()
        do {
            google = try GoogleStandIn(keys: [key])
        } catch {
            redis.shutdown()
            throw error
        }
        connection = redis.unixSocketConnection()
        let configuration = try ServerConfiguration(environment: [
            "SIWA_CLIENT_IDS": "com.example.app", "SIWA_SPOOL_DIR": directory.appendingPathComponent("spool").path,
            "SIWA_JWKS_CACHE": directory.appendingPathComponent("jwks.json").path,
            "SIWA_GOOGLE_CLIENT_IDS": Self.clientID, "SIWA_GOOGLE_RISC_CONFIGURATION_URL": google.configurationURL,
            "SIWA_REDIS_URL": redis.url(),
            // One unknown-kid fetch a second, so the rotation test does not wait a minute.
            "SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": "1", "SIWA_WORKERS": "2",
            // /healthz's PING: 2 s, not 80 ms, so a loaded machine never reads as Redis down.
            "SIWA_HEALTH_PING_TIMEOUT_MS": "2000",
        ])
        let keys = JWKSProvider(settings: configuration.google.keys, fetcher: google.fetcher)
        keys.start()
        let receiver = SecurityEventReceiver(
            settings: configuration.google,
            verifier: SecurityEventVerifier(
                clientIDs: configuration.google.clientIDs, leewaySeconds: configuration.requests.leeway.wholeSeconds),
            keys: keys, startedAt: EndpointClock.system.wallMilliseconds())
        let appleKeys = JWKSProvider(
            settings: JWKSProvider.Settings(url: "https://jwks.invalid/auth/keys"), fetcher: JWKSFetcherDouble())
        let redisSettings = configuration.redis
        let stores = NotificationStorePool(makeStore: {
            NotificationStore(connection: RedisConnection(endpoint: redisSettings.endpoint))
        })
        let breaker = RedisCircuitBreaker(retryInterval: configuration.redis.circuitRetryInterval) {
            (try? stores.withStore { store throws(RedisError) in store.probe() }) ?? nil
        }
        spool = try NotificationSpool(directory: configuration.spool.directory)
        responder = NotificationResponder(
            configuration: configuration,
            verifier: NotificationVerifier(clientIDs: configuration.clientIDs),
            keys: appleKeys, breaker: breaker, stores: stores,
            spool: spool, drain: nil,
            metrics: ServerMetrics(), google: receiver, log: logged.sink)
        services.start(breaker)
    }

    deinit {
        services.stop(until: .now + .seconds(10))
        google.shutdown()
        redis.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }

    struct Answer {
        let status: Int
        let body: String
        let headers: [String: String]

        /// The RFC 8935 error body's `err`, when it is one.
        var err: String? {
            guard case .object(let members)? = try? StrictJSONParser.parse(Array(body.utf8)),
                members.count == 2, case .string(let description)? = members["description"], !description.isEmpty,
                case .string(let err)? = members["err"]
            else { return nil }
            return err
        }
    }

    func push(
        _ token: String, contentType: String? = "application/secevent+jwt", method: String = "POST",
        path: String = path
    ) -> Answer {
        var params = ["REQUEST_METHOD": method, "DOCUMENT_URI": path]
        if let contentType { params["CONTENT_TYPE"] = contentType }
        let response = responder.handle(FastCGIRequest(params: params, body: .complete(Array(token.utf8))))
        var headers: [String: String] = [:]
        for header in response.headers { headers[header.name] = header.value }
        return Answer(status: response.status, body: String(decoding: response.body, as: UTF8.self), headers: headers)
    }

    func token(
        _ type: SecurityEventType, jti: String, iat: Int64 = Int64(Date().timeIntervalSince1970), reason: String? = nil,
        state: String? = nil, key: TestSigningKey? = nil, issuer: String = TestSecurityEvent.issuer
    ) throws -> String {
        try TestSecurityEvent.token(
            type, clientID: Self.clientID, sub: Self.sub, issuedAt: iat, tokenID: jti, key: key ?? self.key,
            reason: reason, state: state, issuer: issuer)
    }

    var userKey: String { "siwa:google:user:{\(Self.clientID):\(Self.sub)}" }

    func userFields() throws -> [String: String] { try #require(try connection.command("HGETALL", userKey).fieldMap) }

    func keyCount() throws -> Int64 { try #require(try connection.command("DBSIZE").integer) }

    func isAccepted(_ answer: Answer) -> Bool {
        answer.status == 202 && answer.body.isEmpty && answer.headers["Content-Type"] == nil
    }

    @Test("every event type: 202 with an empty body, and its effect in Redis")
    func everyEventType() throws {
        let now = Int64(Date().timeIntervalSince1970)
        #expect(isAccepted(push(try token(.sessionsRevoked, jti: "e-1", iat: now - 50))))
        #expect(try userFields()["sessions_revoked_at"] == String((now - 50) * 1000))
        #expect(isAccepted(push(try token(.tokensRevoked, jti: "e-2", iat: now - 40))))
        #expect(try userFields()["sessions_revoked_at"] == String((now - 40) * 1000))
        #expect(isAccepted(push(try token(.accountDisabled, jti: "e-3", iat: now - 30, reason: "hijacking"))))
        var fields = try userFields()
        #expect(fields["sessions_revoked_at"] == String((now - 30) * 1000))
        #expect(fields["account_disabled"] == "true")
        #expect(fields["account_disabled_reason"] == "hijacking")
        #expect(isAccepted(push(try token(.accountEnabled, jti: "e-4", iat: now - 20))))
        fields = try userFields()
        #expect(fields["account_disabled"] == "false")
        #expect(fields["account_disabled_reason"] == nil)
        #expect(isAccepted(push(try token(.accountCredentialChangeRequired, jti: "e-5", iat: now - 10))))
        #expect(try userFields()["credential_change_required_at"] == String((now - 10) * 1000))
        #expect(isAccepted(push(try token(.tokenRevoked, jti: "e-6", iat: now - 5))))
        #expect(isAccepted(push(try token(.verification, jti: "e-7", iat: now - 4, state: "st-1"))))
        #expect(try connection.command("HGET", "siwa:google:verification:st-1", "jti").string == "e-7")
        #expect(isAccepted(push(try token(.unknown, jti: "e-8", iat: now - 3))))
        let entries = try #require(try connection.command("XRANGE", "siwa:events", "-", "+").array)
        let types = try entries.map { entry in try #require(entry.array?.last?.fieldMap)["type"] ?? "" }
        #expect(
            types == [
                "sessions-revoked", "tokens-revoked", "account-disabled", "account-enabled",
                "account-credential-change-required", "token-revoked", "verification", "unknown",
            ])
        let providers = try entries.map { entry in try #require(entry.array?.last?.fieldMap)["provider"] ?? "" }
        #expect(Set(providers) == ["google"])
        #expect(logged.lines(event: "unknown_security_event_type").count == 1)
        let metrics = push("", method: "GET", path: "/metrics").body
        #expect(metrics.contains("siwa_google_client_events_total{client_id=\"\(Self.clientID)\"} 8\n"))
        // Sent again, the same token is answered as if new, and changes nothing.
        #expect(isAccepted(push(try token(.sessionsRevoked, jti: "e-1", iat: now - 50))))
        #expect(try connection.command("XLEN", "siwa:events").integer == 8)
    }

    @Test("each refusal: 400, its RFC 8935 code, Content-Language, and Redis untouched")
    func refusals() throws {
        let forger = try TestSigningKey.generate(keyID: key.keyID)
        let stranger = try TestSigningKey.generate(keyID: "made-up-kid")
        let otherApp = try TestSecurityEvent.token(
            .sessionsRevoked, clientID: "999-other.apps.googleusercontent.com", sub: Self.sub,
            issuedAt: Int64(Date().timeIntervalSince1970), tokenID: "r-aud", key: key)
        let genuine = try token(.sessionsRevoked, jti: "r-ok")
        let cases: [(String, Answer, String)] = [
            (
                "wrong issuer", push(try token(.sessionsRevoked, jti: "r-1", issuer: "https://accounts.google.com")),
                "invalid_issuer"
            ),
            ("another app's client ID", push(otherApp), "invalid_audience"),
            (
                "forged signature under Google's kid", push(try token(.sessionsRevoked, jti: "r-2", key: forger)),
                "authentication_failed"
            ),
            ("not a token", push("hello"), "invalid_request"),
            ("Apple's wrapper", push(#"{"payload":"\#(genuine)"}"#), "invalid_request"),
            (
                "iat an hour ahead",
                push(try token(.sessionsRevoked, jti: "r-4", iat: Int64(Date().timeIntervalSince1970) + 3600)),
                "invalid_request"
            ),
            ("Content-Type application/json", push(genuine, contentType: "application/json"), "invalid_request"),
            ("no Content-Type", push(genuine, contentType: nil), "invalid_request"),
        ]
        for (name, answer, err) in cases {
            #expect(answer.status == 400, "\(name)")
            #expect(answer.err == err, "\(name): \(answer.body)")
            #expect(answer.headers["Content-Type"] == "application/json", "\(name)")
            #expect(answer.headers["Content-Language"] == "en", "\(name)")
        }
        // A made-up kid: answered 503 while no refresh may be made for it (the rate limit),
        // then, once a refresh has brought Google's keys without it, 400 invalid_key.
        let madeUp = try token(.sessionsRevoked, jti: "r-3", key: stranger)
        var madeUpAnswer = push(madeUp)
        #expect(madeUpAnswer.status == 503 || madeUpAnswer.err == "invalid_key")
        #expect(
            waitUntil(timeout: 5) {
                madeUpAnswer = self.push(madeUp)
                return madeUpAnswer.err == "invalid_key"
            })
        #expect(madeUpAnswer.status == 400)
        #expect(madeUpAnswer.headers["Content-Language"] == "en")
        #expect(try keyCount() == 0)
        let get = push(genuine, method: "GET")
        #expect(get.status == 405)
        #expect(get.headers["Allow"] == "POST")
        #expect(try keyCount() == 0)
        // The media type is read case-insensitively, parameters aside.
        #expect(isAccepted(push(genuine, contentType: "Application/SECEVENT+JWT; charset=utf-8")))
        let metrics = push("", method: "GET", path: "/metrics").body
        #expect(
            metrics.contains("siwa_google_client_refusals_total{client_id=\"\(Self.clientID)\",reason=\"iss\"} 1\n"))
        #expect(metrics.contains("siwa_google_client_refusals_total{client_id=\"unlisted\",reason=\"aud\"} 1\n"))
    }

    @Test("/healthz says whether Google is served and its keys' state, and Google is never its reason")
    func health() throws {
        let answer = push("", method: "GET", path: "/healthz")
        guard case .object(let document)? = try? StrictJSONParser.parse(Array(answer.body.utf8)) else {
            Issue.record("no health document: \(answer.body)")
            return
        }
        #expect(document["google"] == .object(["status": .string("ok"), "keys": .integer(1)]))
        // Apple's keys (a double here) are what the answer's health is about, not Google's.
        #expect(document["keys"] == .integer(0))
        #expect(document["reason"] == .string("no Apple signing keys loaded"))
    }

    @Test("a rotation: a token under a newly published kid is fetched for and accepted")
    func rotation() throws {
        let next = try TestSigningKey.generate(keyID: "google-key-2")
        try google.publish([next])
        // The unknown-kid refresh counts a second from the start fetch.
        #expect(
            try waitUntil(timeout: 5) {
                self.push(try self.token(.sessionsRevoked, jti: "rot-\(UUID().uuidString)", key: next)).status == 202
            })
        // The old key is gone from the new document: a token under it is now an unknown kid.
        #expect(
            try waitUntil(timeout: 5) {
                self.push(try self.token(.sessionsRevoked, jti: "old-\(UUID().uuidString)")).err == "invalid_key"
            })
    }

    /// The replayer serve runs, on the responder's spool, with its own connection.
    func replayer() throws -> SpoolReplayer {
        SpoolReplayer(
            spool: spool, rejected: try SpoolSetAsideStore(spoolDirectory: spool.directory),
            store: NotificationStore(connection: redis.unixSocketConnection()), metrics: ServerMetrics(),
            clientIDs: ["com.example.app"], googleClientIDs: [Self.clientID], clock: .system, log: logged.sink)
    }

    @Test("Redis away: a verified token is spooled (202 once fsync'd) and applied once when Redis is back")
    func redisAwaySpoolsAndReplays() throws {
        let issuedAt = Int64(Date().timeIntervalSince1970)
        redis.stop()
        let answer = push(try token(.sessionsRevoked, jti: "down-1", iat: issuedAt))
        #expect(isAccepted(answer))
        #expect(spool.depth == 1)
        try redis.start()
        let report = try replayer().replayOnce()
        #expect(report.taken == 1)
        #expect(report.count(.stored(.applied)) == 1)
        #expect(spool.depth == 0)
        let fields = try userFields()
        #expect(fields["sessions_revoked_at"] == String(issuedAt * 1000))
        #expect(fields["last_jti"] == "down-1")
        let entries = try #require(try connection.command("XRANGE", "siwa:events", "-", "+").array)
        #expect(entries.count == 1)
        let entryFields = try #require(entries.first?.array?.last?.fieldMap)
        #expect(entryFields["provider"] == "google")
        #expect(entryFields["jti"] == "down-1")
        #expect(entryFields["applied"] == "1")
    }

    @Test("a spooled token already stored in Redis replays as a duplicate: no second entry")
    func replayOfStoredTokenIsDuplicate() throws {
        let issuedAt = Int64(Date().timeIntervalSince1970)
        #expect(isAccepted(push(try token(.sessionsRevoked, jti: "twice-1", iat: issuedAt))))
        // The copy a replica shortfall or a timed-out call that ran after all leaves behind.
        try spool.append(
            VerifiedSecurityEvent(
                clientIDs: [Self.clientID], tokenID: "twice-1", issuedAt: issuedAt,
                events: [
                    SecurityEvent(
                        type: .sessionsRevoked, rawType: SecurityEventType.sessionsRevoked.uri, subject: Self.sub)
                ]))
        #expect(spool.depth == 1)
        let report = try replayer().replayOnce()
        #expect(report.count(.stored(.duplicate)) == 1)
        #expect(report.taken == 1)
        #expect(try connection.command("XLEN", "siwa:events").integer == 1)
    }
}
