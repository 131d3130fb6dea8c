import Foundation
import SIWAFastCGIClient
import SIWARedis
import SIWATestKit
import Testing

/// README claims about the running responder, each proven on the real binary against a
/// real redis-server and a real nginx serving the JWKS (the stand-in for Apple's).
/// Tests/CLAIMS.md maps every README claim to its test.
@Suite("README claims, proven on serve", .serialized)
struct ServeClaimTests {
    static let eventTime: Int64 = 1_796_000_000_000

    @Test("on a tie of event times what is stored stays")
    func tieKeepsWhatIsStored() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let revoked = "000031.a.0001"
        let first = try stack.post(
            try stack.body(type: "consent-revoked", sub: revoked, eventTimeMilliseconds: Self.eventTime))
        #expect(first.bodyText == #"{"status":"applied"}"#)
        let stored = try stack.userHash(sub: revoked)
        // Another revocation at the same millisecond (another jti): stale, nothing changes.
        let again = try stack.post(
            try stack.body(type: "consent-revoked", sub: revoked, eventTimeMilliseconds: Self.eventTime))
        #expect(again.bodyText == #"{"status":"stale"}"#)
        #expect(try stack.userHash(sub: revoked) == stored)
        // A deletion at the same millisecond is news (its own field), but the latest event
        // stays the first one: last_event_* and last_jti keep what is stored.
        let deleted = try stack.post(
            try stack.body(type: "account-deleted", sub: revoked, eventTimeMilliseconds: Self.eventTime))
        #expect(deleted.bodyText == #"{"status":"applied"}"#)
        let after = try stack.userHash(sub: revoked)
        #expect(after["account_deleted_at"] == String(Self.eventTime))
        #expect(after["last_event_type"] == "consent-revoked")
        #expect(after["last_jti"] == stored["last_jti"])

        let email = "000031.a.0002"
        let enabled = try stack.post(
            try stack.body(
                type: "email-enabled", sub: email, eventTimeMilliseconds: Self.eventTime, email: "first@example.com",
                isPrivateEmail: false))
        #expect(enabled.bodyText == #"{"status":"applied"}"#)
        let emailState = try stack.userHash(sub: email)
        let disabled = try stack.post(
            try stack.body(
                type: "email-disabled", sub: email, eventTimeMilliseconds: Self.eventTime, email: "second@example.com",
                isPrivateEmail: true))
        #expect(disabled.bodyText == #"{"status":"stale"}"#)
        #expect(try stack.userHash(sub: email) == emailState)
    }

    @Test("no keys at start: /healthz 503, and the empty key set makes the first notification fetch them")
    func emptyKeySetTriggersARefresh() throws {
        let stack = try ServeStack(
            extraEnvironment: ["SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": "1"], initialJWKSDocument: #"{"keys":[]}"#)
        defer { stack.shutdown() }
        let health = try stack.health()
        #expect(health.status == 503)
        #expect(health.jsonFields["keys"] == "0")
        #expect(health.jsonFields["reason"] == "no Apple signing keys loaded")
        #expect(health.header("Retry-After") == "30")
        let metrics = try stack.request("GET", "/metrics").bodyText
        // At least the start's fetch failed; the cold-start backoff (1 s, 2 s, ...) may have
        // failed again by now, so the count is a lower bound.
        #expect((Self.metric("siwa_jwks_refresh_failures_total", in: metrics) ?? 0) >= 1)
        #expect(metrics.contains("siwa_jwks_keys 0\n"))

        // Apple's keys appear. The notification's own refresh or the cold-start backoff
        // (capped here at the 1 s unknown-kid interval) finds them, whichever comes first:
        // this test proves the end result on the real binary; that an empty key set makes a
        // notification ask for a refresh is proven in process, where nothing else fetches
        // (KeySourceRuleTests.emptyThenRefreshed).
        try stack.jwks.serve(Array(try TestSigningKey.jwksDocument([stack.key]).utf8))
        let body = try stack.body(type: "consent-revoked", sub: "000032.b.0001")
        var answer = try stack.post(body)
        // Within the 1 s rate limit of the start fetch the answer is 503 (Apple retries);
        // retry as Apple would until a fetch could be made. The loop waits for the answer to
        // change, so a generous bound costs nothing when it passes: 30 s, for a loaded
        // machine, where the change is due about a second after the start fetch.
        let deadline = ContinuousClock.now + .seconds(30)
        while answer.status == 503 && ContinuousClock.now < deadline {
            usleep(200_000)
            answer = try stack.post(body)
        }
        #expect(answer.bodyText == #"{"status":"applied"}"#)
        #expect(try stack.health().status == 200)
        // siwa_jwks_age_seconds moves with time once keys are held.
        let age = try #require(Self.metric("siwa_jwks_age_seconds", in: try stack.request("GET", "/metrics").bodyText))
        #expect(
            try stack.waitUntil(timeout: 10) {
                (Self.metric("siwa_jwks_age_seconds", in: try stack.request("GET", "/metrics").bodyText) ?? 0) >= age
                    + 1
            })
    }

    @Test("a transient Redis refusal keeps the record queued, and it is applied once Redis takes writes")
    func transientRefusalKeepsTheRecordQueued() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let redis = stack.redisConnection()
        // A replica of a master that does not exist: reads answer, every write is refused
        // with READONLY ("not now": a failover in progress).
        _ = try redis.command("REPLICAOF", "127.0.0.1", "1")
        let sub = "000033.c.0001"
        let response = try stack.post(try stack.body(type: "consent-revoked", sub: sub))
        #expect(response.bodyText == #"{"status":"spooled"}"#)
        // Wait until the replayer has met the refusal at least twice (calls beyond the worker's).
        #expect(try stack.waitUntil(timeout: 15) { try Self.failedScriptCalls(redis) >= 3 })
        let metrics = try stack.request("GET", "/metrics").bodyText
        #expect(metrics.contains("siwa_spool_rejected_total 0\n"))
        #expect((Self.metric("siwa_redis_errors_total", in: metrics) ?? 0) >= 1)
        #expect(stack.serve?.logLines(event: "spool_record_rejected") == [])
        #expect(try stack.health().jsonFields["spool_depth"] == "1")

        _ = try redis.command("REPLICAOF", "NO", "ONE")
        #expect(try stack.waitUntil(timeout: 15) { try stack.userHash(sub: sub)["consent_revoked_at"] != nil })
        #expect(
            try stack.waitUntil(timeout: 5) { try stack.health().jsonFields["spool_depth"] == "0" })
        #expect(try stack.streamLength() == 1)
    }

    @Test("404 and 405 answer JSON; /healthz and /metrics allow GET, HEAD")
    func otherRoutes() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let notFound = try stack.request("GET", "/other")
        #expect(notFound.status == 404)
        #expect(notFound.bodyText == #"{"status":"not_found"}"#)
        #expect(notFound.header("Content-Type") == "application/json")
        let wrongMethod = try stack.request("PUT", "/apple/notifications")
        #expect(wrongMethod.status == 405)
        #expect(wrongMethod.bodyText == #"{"status":"method_not_allowed"}"#)
        #expect(wrongMethod.header("Allow") == "POST")
        for path in ["/healthz", "/metrics"] {
            let post = try stack.request("POST", path)
            #expect(post.status == 405, "\(path)")
            #expect(post.bodyText == #"{"status":"method_not_allowed"}"#, "\(path)")
            #expect(post.header("Allow") == "GET, HEAD", "\(path)")
            #expect(try stack.request("HEAD", path).status == 200, "\(path)")
        }
        #expect(try stack.redisSnapshot() == [])
    }

    @Test("a body that ends before CONTENT_LENGTH is body_incomplete, 400, Redis untouched")
    func bodyIncomplete() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let body = try stack.body(type: "consent-revoked", sub: "000034.d.0001")
        // The parameters promise the whole body; only half of it comes before the end of stdin.
        let params = FastCGIClient.params(
            method: "POST", uri: "/apple/notifications", body: body, contentType: "application/json",
            extra: [("REQUEST_ID", "cut-short")])
        let response = try FastCGIClient(.unixSocket(stack.socketPath)).send(
            params: params, body: Array(body.prefix(body.count / 2)))
        #expect(response.status == 400)
        #expect(response.jsonFields == ["status": "refused", "error": "body_incomplete"])
        #expect(try stack.redisSnapshot() == [])
        #expect(
            stack.waitUntil(timeout: 5) {
                stack.serve?.logLines(event: "request").contains {
                    $0.contains(#""request_id":"cut-short""#) && $0.contains(#""error":"body_incomplete""#)
                } == true
            })
    }

    @Test("an unknown SIWA_ setting is logged as a warning at start, naming it")
    func unknownSetting() throws {
        let stack = try ServeStack(extraEnvironment: ["SIWA_WORKRES": "3"])
        defer { stack.shutdown() }
        #expect(stack.waitUntil(timeout: 5) { stack.serve?.logLines(event: "unknown_setting").isEmpty == false })
        let lines = stack.serve?.logLines(event: "unknown_setting") ?? []
        #expect(lines.count == 1)
        #expect(lines.first?.contains(#""setting":"SIWA_WORKRES""#) == true)
        #expect(lines.first?.contains(#""level":"warning""#) == true)
    }

    @Test("iat_in_future is logged with the token's iat and the server's time")
    func iatInFutureLogsTheTimes() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let issuedAt = Int64(Date().timeIntervalSince1970) + 3600
        let notification = TestNotification(
            type: "consent-revoked", subject: "000035.e.0001", clientID: ServeStack.clientID, issuedAt: issuedAt)
        let before = Int64(Date().timeIntervalSince1970)
        let response = try stack.post(
            Array(try notification.requestBody(signedWith: stack.key).utf8), requestID: "early")
        let after = Int64(Date().timeIntervalSince1970)
        #expect(response.status == 401)
        #expect(response.jsonFields == ["status": "refused", "error": "iat_in_future"])
        #expect(stack.waitUntil(timeout: 5) { Self.requestLine(stack, id: "early") != nil })
        let line = try #require(Self.requestLine(stack, id: "early"))
        #expect(line.contains(#""error":"iat_in_future""#))
        #expect(line.contains(#""iat":\#(issuedAt)"#))
        let serverTime = try #require(Self.integerField("server_time", in: line))
        #expect((before...after).contains(serverTime))
    }

    @Test("no email address or token in the log on the applied, stale, spooled and replay paths")
    func noSecretsInTheLog() throws {
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        let sub = "000036.f.0001"
        let addresses = ["first-addr@privaterelay.appleid.com", "stale-addr@example.com", "spooled-addr@example.com"]
        let applied = try stack.post(
            try stack.body(
                type: "email-enabled", sub: sub, eventTimeMilliseconds: Self.eventTime, email: addresses[0],
                isPrivateEmail: true))
        #expect(applied.bodyText == #"{"status":"applied"}"#)
        let stale = try stack.post(
            try stack.body(
                type: "email-disabled", sub: sub, eventTimeMilliseconds: Self.eventTime - 1000, email: addresses[1],
                isPrivateEmail: false))
        #expect(stale.bodyText == #"{"status":"stale"}"#)
        stack.redis.kill()
        let spooled = try stack.post(
            try stack.body(
                type: "email-disabled", sub: sub, eventTimeMilliseconds: Self.eventTime + 1000, email: addresses[2],
                isPrivateEmail: false))
        #expect(spooled.bodyText == #"{"status":"spooled"}"#)
        try stack.redis.start()
        // Wait for the replay's own log line: the last line this test is about.
        #expect(stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_replayed").isEmpty == false })
        #expect(try stack.userHash(sub: sub)["email"] == addresses[2])
        let log = try #require(stack.serve?.logText)
        #expect(log.split(separator: "\n").count >= 5)
        for address in addresses { #expect(!log.contains(address)) }
        #expect(!log.contains("@"))
        #expect(!log.contains("eyJ"))
        #expect(!log.contains("payload"))
    }

    @Test("a torn record left by a crash is set aside, counted and logged; the whole record before it is applied")
    func tornRecordIsCounted() throws {
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        stack.redis.kill()
        let sub = "000037.g.0001"
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: sub)).bodyText == #"{"status":"spooled"}"#)
        stack.serve?.kill()
        // A crash mid-write: the file holding the record ends in the start of another one.
        let names = try FileManager.default.contentsOfDirectory(atPath: stack.spoolDirectory)
        let holder = try #require(
            names.first {
                (try? String(contentsOfFile: stack.spoolDirectory + "/" + $0, encoding: .utf8))?.contains(sub) == true
            })
        let handle = try #require(FileHandle(forWritingAtPath: stack.spoolDirectory + "/" + holder))
        handle.seekToEndOfFile()
        handle.write(Data("239 7241f62b {\"v\":1,\"aud\":\"com.exa".utf8))
        try handle.close()

        try stack.redis.start()
        try stack.startServe()
        #expect(try stack.waitUntil(timeout: 15) { try stack.userHash(sub: sub)["consent_revoked_at"] != nil })
        #expect(
            try stack.waitUntil(timeout: 10) {
                try stack.request("GET", "/metrics").bodyText.contains("siwa_spool_torn_records_total 1\n")
            })
        #expect(stack.serve?.logLines(event: "spool_record_torn").count == 1)
        // Its former name beside it, for one release: a search for the old name still finds it.
        #expect(
            stack.serve?.logLines(event: "spool_record_torn").first?.contains(#""formerly":"spool_record_set_aside""#)
                == true)
        #expect(try stack.streamLength() == 1)
    }

    // MARK: helpers

    /// The value of an unlabelled metric.
    static func metric(_ name: String, in text: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.dropFirst(name.count + 1)) }
    }

    /// Script calls Redis refused or that failed (EVAL and EVALSHA), from INFO commandstats.
    static func failedScriptCalls(_ redis: RedisConnection) throws -> Int {
        let info = try redis.command("INFO", "commandstats").string ?? ""
        var total: Int64 = 0
        for line in info.split(whereSeparator: \.isNewline).map(String.init)
        where line.hasPrefix("cmdstat_eval:") || line.hasPrefix("cmdstat_evalsha:") {
            total += integerField("failed_calls", in: line, separator: "=") ?? 0
            total += integerField("rejected_calls", in: line, separator: "=") ?? 0
        }
        return Int(total)
    }

    static func requestLine(_ stack: ServeStack, id: String) -> String? {
        stack.serve?.logLines(event: "request").first { $0.contains(#""request_id":"\#(id)""#) }
    }

    /// An integer field of a JSON log line (`"name":123`) or an INFO line (`name=123`).
    static func integerField(_ name: String, in line: String, separator: String = ":") -> Int64? {
        let key = separator == ":" ? #""\#(name)":"# : name + separator
        guard let range = line.range(of: key) else { return nil }
        return Int64(line[range.upperBound...].prefix { $0 == "-" || $0.isNumber })
    }
}
