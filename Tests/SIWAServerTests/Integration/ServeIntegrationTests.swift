import Foundation
import SIWAFastCGIClient
import SIWATestKit
import Testing

/// The real `siwa-endpoint serve` over its FastCGI socket, against a real redis-server
/// and a real nginx serving the JWKS over HTTPS. Apple is the one part that cannot run
/// here: the test kit's key and JWKS stand in for Apple's.
@Suite("Serve, end to end", .serialized)
struct ServeIntegrationTests {
    static let eventTime: Int64 = 1_796_000_000_000

    @Test("each of the four types lands in Redis exactly as the contract says")
    func fourTypes() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let email = "relay-1@private.icloud.com"
        let posts: [(String, String, String?)] = [
            ("email-disabled", "000001.a.0001", email), ("email-enabled", "000001.a.0002", email),
            ("consent-revoked", "000001.a.0003", nil), ("account-deleted", "000001.a.0004", nil),
        ]
        for (type, sub, address) in posts {
            let response = try stack.post(
                try stack.body(
                    type: type, sub: sub, eventTimeMilliseconds: Self.eventTime, email: address,
                    isPrivateEmail: address == nil ? nil : true))
            #expect(response.status == 200)
            #expect(response.bodyText == #"{"status":"applied"}"#)
        }
        let after = Int64(Date().timeIntervalSince1970 * 1000)
        let time = String(Self.eventTime)

        var disabled = try stack.userHash(sub: "000001.a.0001")
        let updatedAt = Int64(disabled.removeValue(forKey: "updated_at") ?? "") ?? 0
        #expect((before...after).contains(updatedAt))
        #expect(
            disabled == [
                "email_forwarding": "disabled", "email_forwarding_at": time, "email": email, "is_private_email": "true",
                "last_event_type": "email-disabled", "last_event_at": time,
                "last_jti": disabled["last_jti"] ?? "missing",
            ])
        #expect(disabled["last_jti"]?.count == 22)

        var enabled = try stack.userHash(sub: "000001.a.0002")
        enabled["updated_at"] = nil
        enabled["last_jti"] = nil
        #expect(
            enabled == [
                "email_forwarding": "enabled", "email_forwarding_at": time, "email": email, "is_private_email": "true",
                "last_event_type": "email-enabled", "last_event_at": time,
            ])

        var revoked = try stack.userHash(sub: "000001.a.0003")
        revoked["updated_at"] = nil
        revoked["last_jti"] = nil
        #expect(
            revoked == [
                "sessions_revoked_at": time, "consent_revoked_at": time, "last_event_type": "consent-revoked",
                "last_event_at": time,
            ])

        var deleted = try stack.userHash(sub: "000001.a.0004")
        deleted["updated_at"] = nil
        deleted["last_jti"] = nil
        #expect(
            deleted == [
                "sessions_revoked_at": time, "account_deleted_at": time, "email_forwarding": "disabled",
                "email_forwarding_at": time, "last_event_type": "account-deleted", "last_event_at": time,
            ])
        #expect(try stack.streamLength() == 4)
    }

    @Test("a duplicate changes nothing; an older email event is stale; an unknown type is recorded")
    func duplicateStaleUnknown() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let sub = "000002.b.0001"
        let first = try stack.body(
            type: "email-enabled", sub: sub, eventTimeMilliseconds: Self.eventTime + 2000, email: "a@example.com",
            isPrivateEmail: false)
        #expect(try stack.post(first).bodyText == #"{"status":"applied"}"#)
        let state = try stack.userHash(sub: sub)
        #expect(try stack.post(first).bodyText == #"{"status":"duplicate"}"#)
        #expect(try stack.userHash(sub: sub) == state)
        #expect(try stack.streamLength() == 1)

        let older = try stack.body(
            type: "email-disabled", sub: sub, eventTimeMilliseconds: Self.eventTime + 1000, email: "a@example.com",
            isPrivateEmail: false)
        #expect(try stack.post(older).bodyText == #"{"status":"stale"}"#)
        #expect(try stack.userHash(sub: sub) == state)

        let unknown = try stack.body(type: "passkey-added", sub: sub, eventTimeMilliseconds: Self.eventTime + 3000)
        let response = try stack.post(unknown)
        #expect(response.status == 200)
        #expect(response.bodyText == #"{"status":"recorded"}"#)
        #expect(try stack.userHash(sub: sub) == state)
        #expect(try stack.streamLength() == 3)
        #expect(stack.serve?.logLines(event: "unknown_notification_type").count == 1)
    }

    @Test("every refusal has its status and code, and leaves Redis untouched")
    func refusalsChangeNothing() throws {
        let stack = try ServeStack(extraEnvironment: ["SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": "1"])
        defer { stack.shutdown() }
        let attacker = try TestSigningKey.generate(keyID: stack.key.keyID)
        let stranger = try TestSigningKey.generate(keyID: "not-in-the-jwks")
        var expired = TestNotification(
            type: "consent-revoked", subject: "000003.c.0001", clientID: ServeStack.clientID, issuedAt: 1_700_000_000)
        expired.eventTimeMilliseconds = 1_700_000_000_000
        let cases: [(String, [UInt8], Int, String)] = [
            ("not JSON", Array("payload=x".utf8), 400, "body_not_json"),
            ("no payload", Array(#"{"token":"a.b.c"}"#.utf8), 400, "payload_missing"),
            (
                "bad signature", try stack.body(type: "consent-revoked", sub: "000003.c.0002", signedWith: attacker),
                401, "signature_invalid"
            ),
            (
                "another app", try stack.body(type: "consent-revoked", sub: "000003.c.0003", clientID: "com.other.app"),
                403, "aud_not_served"
            ),
            ("expired", Array(try expired.requestBody(signedWith: stack.key).utf8), 401, "token_expired"),
            (
                "unknown kid, JWKS reachable",
                try stack.body(type: "consent-revoked", sub: "000003.c.0004", signedWith: stranger), 401, "kid_unknown"
            ),
            ("70 KiB", [UInt8](repeating: UInt8(ascii: " "), count: 70 * 1024), 413, "body_too_large"),
        ]
        // An unknown kid is called unknown (401) only after a fetch made for it: let the
        // 1 s rate limit since the start fetch pass.
        usleep(1_100_000)
        for (name, body, status, code) in cases {
            let response = try stack.post(body)
            #expect(response.status == status, "\(name)")
            #expect(response.jsonFields == ["status": "refused", "error": code], "\(name)")
        }
        #expect(try stack.request("GET", "/apple/notifications").status == 405)
        #expect(try stack.request("GET", "/apple/notifications").header("Allow") == "POST")
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: "000003.c.0005"), path: "/other").status == 404)
        #expect(try stack.redisSnapshot() == [])
        // The log has one line per refusal, with the code and never the body.
        let log = stack.serve?.logText ?? ""
        for (_, _, _, code) in cases { #expect(log.contains(#""error":"\#(code)""#)) }
        #expect(!log.contains("eyJ"))
        #expect(!log.contains("payload=x"))
    }

    @Test("healthz and metrics")
    func healthAndMetrics() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let health = try stack.health()
        #expect(health.status == 200)
        #expect(health.bodyText == #"{"status":"ok","keys":1,"redis":"ok","spool_depth":0}"#)

        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000004.d.0001")).status == 200)
        #expect(try stack.post(Array("x".utf8)).status == 400)
        let metrics = try stack.request("GET", "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.header("Content-Type") == "text/plain; version=0.0.4")
        let text = metrics.bodyText
        #expect(text.contains(#"siwa_requests_total{status="200",outcome="applied",type="consent-revoked",code=""} 1"#))
        #expect(text.contains(#"siwa_requests_total{status="400",outcome="refused",type="",code="body_not_json"} 1"#))
        #expect(text.contains("siwa_jwks_keys 1\n"))
        #expect(text.contains("siwa_spool_depth 0\n"))
        #expect(text.contains("siwa_redis_errors_total 0\n"))
        // The two posts; the /healthz probe is counted apart.
        #expect(text.contains(#"siwa_request_duration_seconds_bucket{le="+Inf"} 2"#))
        #expect(text.contains(#"siwa_probe_answers_total{path="/healthz",status="200"} 1"#))

        stack.redis.kill()
        let down = try stack.health()
        #expect(down.status == 503)
        #expect(down.jsonFields["status"] == "unavailable")
        #expect(down.jsonFields["reason"] == "Redis does not answer")
        #expect(try stack.request("POST", "/healthz").status == 405)
    }

    @Test("Redis killed mid-run: notifications are spooled, then applied once when it is back")
    func redisOutage() throws {
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        for index in 1...3 {
            let response = try stack.post(try stack.body(type: "consent-revoked", sub: "000005.e.000\(index)"))
            #expect(response.bodyText == #"{"status":"applied"}"#)
        }
        stack.redis.kill()
        for index in 4...6 {
            let response = try stack.post(try stack.body(type: "consent-revoked", sub: "000005.e.000\(index)"))
            #expect(response.status == 200)
            #expect(response.bodyText == #"{"status":"spooled"}"#)
        }
        #expect(try stack.health().jsonFields["spool_depth"] == "3")
        try stack.redis.start()
        #expect(try stack.waitUntil(timeout: 15) { try stack.streamLength() == 6 })
        for index in 1...6 {
            #expect(try stack.userHash(sub: "000005.e.000\(index)")["last_event_type"] == "consent-revoked")
        }
        // The depth drops once a pass has freed its segment, just after the last write.
        #expect(
            try stack.waitUntil(timeout: 10) {
                let health = try stack.health()
                return health.status == 200 && health.jsonFields["spool_depth"] == "0"
            })
        // Applied once: a second pass would have added stream entries.
        usleep(1_500_000)
        #expect(try stack.streamLength() == 6)
        #expect(try stack.request("GET", "/metrics").bodyText.contains("siwa_spool_replayed_total 3\n"))
    }

    @Test("the responder killed with SIGKILL and restarted loses nothing answered 2xx")
    func responderKilled() throws {
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000006.f.0001")).status == 200)
        stack.serve?.kill()
        try stack.startServe()
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000006.f.0002")).status == 200)

        // Now with Redis down: spooled, the responder killed, both back.
        stack.redis.kill()
        #expect(
            try stack.post(try stack.body(type: "account-deleted", sub: "000006.f.0003")).bodyText
                == #"{"status":"spooled"}"#)
        stack.serve?.kill()
        try stack.redis.start()
        try stack.startServe()
        #expect(try stack.waitUntil(timeout: 10) { try stack.streamLength() == 3 })
        #expect(try stack.userHash(sub: "000006.f.0001")["last_event_type"] == "consent-revoked")
        #expect(try stack.userHash(sub: "000006.f.0002")["last_event_type"] == "consent-revoked")
        #expect(try stack.userHash(sub: "000006.f.0003")["last_event_type"] == "account-deleted")
        #expect(stack.serve?.logLines(event: "spool_pending_at_start").count == 1)
    }

    @Test("SIGTERM: stops accepting, exits 0 within the bound, removes its socket")
    func gracefulStop() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000007.g.0001")).status == 200)
        stack.serve?.terminate()
        #expect(stack.serve?.waitForExit(timeout: 12) == 0)
        // The stop is announced when SIGTERM arrives, and its end once done.
        let lines = (stack.serve?.logText ?? "").split(separator: "\n").map(String.init)
        let stopping = lines.firstIndex { $0.contains(#""event":"stopping""#) }
        let stopped = lines.firstIndex { $0.contains(#""event":"stopped""#) }
        #expect(stopping != nil && stopped != nil && stopping! < stopped!, "\(lines.suffix(3))")
        #expect(stopping.map { lines[$0].contains(#""spool_depth":0"#) } == true)
        #expect(stack.serve?.logLines(event: "stopped").first?.contains(#""drained":true"#) == true)
        #expect(!FileManager.default.fileExists(atPath: stack.socketPath))
    }

    @Test("Apple's keys: a new kid is fetched on demand; with the JWKS server down an unknown kid is 503")
    func keyRotationAndOutage() throws {
        // Refreshes on an unknown kid are rate-limited from the last fetch (the first one at
        // start), counted in whole seconds: a limit of L seconds holds for more than L - 1 s
        // of wall time. 4 s, so the one post that must land inside the limit (`tooSoon`) has
        // over 3 s, room for a loaded machine; each wait for the limit to pass is a poll for
        // the answer that only a fetch can give, bounded, not a sleep.
        let stack = try ServeStack(extraEnvironment: ["SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": "4"])
        defer { stack.shutdown() }
        // Posts `body` until the answer is no longer the rate limit's 503 (bounded); each 503
        // on the way changes nothing (no fetch, no state), which is checked too.
        func postOnceTheLimitPasses(_ body: [UInt8]) throws -> FastCGIClient.Response? {
            var answer: FastCGIClient.Response?
            _ = try stack.waitUntil(timeout: 20) {
                let response = try stack.post(body)
                answer = response
                guard response.status == 503 else { return true }
                #expect(response.jsonFields == ["status": "unavailable", "error": "keys_unavailable"])
                return false
            }
            return answer
        }
        let next = try TestSigningKey.generate(keyID: "test-apple-key-next")
        try stack.jwks.serve(Array(TestSigningKey.jwksDocument([next]).utf8))
        let rotated = try postOnceTheLimitPasses(
            try stack.body(type: "consent-revoked", sub: "000008.h.0001", signedWith: next))
        #expect(rotated?.bodyText == #"{"status":"applied"}"#)
        // The old key left the JWKS with that refresh. Within the rate limit no fetch looks for
        // it again (503, Apple would retry); once one has, it is unknown for good (401).
        let tooSoon = try stack.post(try stack.body(type: "consent-revoked", sub: "000008.h.0002"))
        #expect(tooSoon.status == 503)
        #expect(tooSoon.jsonFields["error"] == "keys_unavailable")
        let old = try postOnceTheLimitPasses(try stack.body(type: "consent-revoked", sub: "000008.h.0002"))
        #expect(old?.status == 401)
        #expect(old?.jsonFields["error"] == "kid_unknown")

        // With the JWKS server down, an unknown kid is 503 also once a fetch has been made for
        // it: posted until the fetch failures counter shows that fetch (bounded).
        func refreshFailures() throws -> String? {
            try stack.request("GET", "/metrics").bodyText.split(separator: "\n")
                .first { $0.hasPrefix("siwa_jwks_refresh_failures_total ") }.map { String($0) }
        }
        let failuresBefore = try refreshFailures()
        stack.jwks.nginx.stop()
        let third = try TestSigningKey.generate(keyID: "test-apple-key-third")
        let thirdBody = try stack.body(type: "consent-revoked", sub: "000008.h.0003", signedWith: third)
        var unavailable: FastCGIClient.Response?
        #expect(
            try stack.waitUntil(timeout: 20) {
                unavailable = try stack.post(thirdBody)
                return try refreshFailures() != failuresBefore
            }, "a fetch for the unknown kid was made and failed")
        #expect(unavailable?.status == 503)
        #expect(unavailable?.jsonFields == ["status": "unavailable", "error": "keys_unavailable"])
        #expect(unavailable?.header("Retry-After") == "30")
        // The last good key still verifies while the JWKS server is down.
        #expect(
            try stack.post(
                try stack.body(type: "email-enabled", sub: "000008.h.0004", email: "x@example.com", signedWith: next)
            ).status == 200)
        #expect(try stack.userHash(sub: "000008.h.0003") == [:])
    }

    @Test("a bad setting stops serve at once with a message naming it")
    func badSetting() throws {
        let run = try CommandRun.endpoint(
            ["serve"], environment: ["SIWA_CLIENT_IDS": "com.example.app", "SIWA_WORKERS": "lots"])
        let text = run.errors
        #expect(run.status == 2)
        // One JSON line, naming the setting (the JSON escapes the value's quotes).
        #expect(text.split(separator: "\n").count == 1)
        #expect(text.contains(#""event":"configuration_invalid","setting":"SIWA_WORKERS""#))
        #expect(text.contains(#"SIWA_WORKERS must be a whole number from 1 to 256, got \"lots\""#))
    }

    @Test("a spooled record Redis refuses for good is set aside, and does not hold back the spool")
    func poisonRecordSetAside() throws {
        // Redis keeps its data across the stop (append-only), so the key is there when it is back.
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        // Another program wrote a string where the user's hash belongs: WRONGTYPE, every time.
        _ = try stack.redisConnection().command("SET", "siwa:user:{\(ServeStack.clientID):000011.q.0001}", "not a hash")
        // Spooled while Redis is down (the live path refuses it with 503 when Redis answers);
        // replayed once Redis is back, it can only be set aside.
        let poisoned = try stack.postWhileRedisIsDown([try stack.body(type: "consent-revoked", sub: "000011.q.0001")])
        #expect(poisoned.map(\.bodyText) == [#"{"status":"spooled"}"#])
        #expect(
            try stack.waitUntil(timeout: 10) {
                try stack.request("GET", "/metrics").bodyText.contains("siwa_spool_rejected_total 1\n")
            })
        #expect(try stack.health().jsonFields["spool_depth"] == "0")
        let rejected = try FileManager.default.contentsOfDirectory(atPath: stack.spoolDirectory + "/rejected")
            .filter { $0.hasSuffix(".log") }
        let records = try rejected.map {
            try String(contentsOfFile: stack.spoolDirectory + "/rejected/" + $0, encoding: .utf8)
        }.joined().split(separator: "\n")
        #expect(records.count == 1)
        #expect(
            stack.serve?.logLines(event: "spool_record_rejected").first?.contains(#""error":"redis_server_error""#)
                == true)
        // The next notification is applied as usual.
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: "000011.q.0002")).bodyText
                == #"{"status":"applied"}"#)
    }

    @Test("Redis down and the spool unwritable: 503 with Retry-After, so Apple retries")
    func nowhereToStore() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        stack.redis.kill()
        // As root, mode bits do not stop writes: make the spool immutable (ext4's chattr +i).
        let spoolEntries = try FileManager.default.contentsOfDirectory(atPath: stack.spoolDirectory)
            .map { stack.spoolDirectory + "/" + $0 }
        let paths = spoolEntries + [stack.spoolDirectory]
        try #require(Self.chattr("+i", paths), "chattr +i is needed to make the spool unwritable")
        defer { _ = Self.chattr("-i", paths) }
        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "000012.r.0001"))
        #expect(response.status == 503)
        #expect(response.jsonFields == ["status": "unavailable", "error": "store_unavailable"])
        #expect(response.header("Retry-After") == "30")
        let appendFailed = stack.serve?.logLines(event: "spool_append_failed") ?? []
        #expect(appendFailed.count == 1)
        // The system's errno by name: an immutable directory refuses with EPERM.
        #expect(appendFailed.first?.contains(#""errno":"EPERM""#) == true)
    }

    static func chattr(_ flag: String, _ paths: [String]) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
        process.arguments = [flag] + paths
        do { try process.run() } catch { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }

    @Test("SIGTERM with a request in flight: it is finished and answered, then serve exits 0")
    func sigtermFinishesTheRequestInFlight() throws {
        let stack = try ServeStack(extraEnvironment: ["SIWA_MAX_BODY_BYTES": "131072"])
        defer { stack.shutdown() }
        // A worker takes a request only once it is whole; one whose body is still arriving
        // when SIGTERM comes is watched on until its end (or its deadline): padded with
        // JSON whitespace, this body arrives in two parts, SIGTERM between them.
        let body =
            [UInt8](repeating: 0x20, count: 100_000) + (try stack.body(type: "consent-revoked", sub: "000013.s.0001"))
        let firstPart = 90_000
        let params = FastCGIClient.params(
            method: "POST", uri: "/apple/notifications", body: body, contentType: "application/json",
            extra: [("REQUEST_ID", "in-flight")])
        let encoded = params.reduce(into: [UInt8]()) { bytes, pair in
            FastCGIClient.appendLength(&bytes, pair.0.utf8.count)
            FastCGIClient.appendLength(&bytes, pair.1.utf8.count)
            bytes += Array(pair.0.utf8) + Array(pair.1.utf8)
        }
        let connection = try FastCGIClient(.unixSocket(stack.socketPath)).connect()
        defer { connection.close() }
        // The request begins: parameters and most of the body...
        var first: [UInt8] = []
        FastCGIClient.appendRecord(&first, type: 1, requestID: 1, content: [0, 1, 0, 0, 0, 0, 0, 0])
        FastCGIClient.appendStream(&first, type: 4, requestID: 1, content: encoded)
        first += FastCGIHostilePeerTests.bodyRecords(Array(body.prefix(firstPart)))
        try connection.writeAll(first)
        // In flight once the acceptor has looked at it: a /healthz sent after it is answered
        // (connections are accepted, and looked at, in the order they came).
        #expect(try stack.health().status == 200)
        // ...SIGTERM arrives while it is in flight: it has taken effect once the socket refuses
        // new connections, and serve still runs, holding the request...
        stack.serve?.terminate()
        #expect(
            stack.waitUntil(timeout: 10) { !ServeProcess.accepts(stack.socketPath) }, "SIGTERM stops accepting")
        #expect(stack.serve?.process.isRunning == true)
        // ...and the rest of the body still gets a real answer.
        var rest: [UInt8] = []
        FastCGIClient.appendRecord(&rest, type: 5, requestID: 1, content: Array(body.suffix(from: firstPart)))
        FastCGIClient.appendRecord(&rest, type: 5, requestID: 1, content: [UInt8]())
        try connection.writeAll(rest)
        let raw = try connection.readToEnd()
        var stdout: [UInt8] = []
        var offset = 0
        while offset + 8 <= raw.count {
            let length = Int(raw[offset + 4]) << 8 | Int(raw[offset + 5])
            if raw[offset + 1] == 6 { stdout += raw[(offset + 8)..<(offset + 8 + length)] }
            offset += 8 + length + Int(raw[offset + 6])
        }
        let response = try FastCGIClient.parseCGI(stdout)
        #expect(response.status == 200)
        #expect(response.bodyText == #"{"status":"applied"}"#)
        #expect(stack.serve?.waitForExit(timeout: 12) == 0)
        #expect(try stack.userHash(sub: "000013.s.0001")["last_event_type"] == "consent-revoked")
        // And nothing new is accepted once it has stopped.
        #expect(!ServeProcess.accepts(stack.socketPath))
    }
}
