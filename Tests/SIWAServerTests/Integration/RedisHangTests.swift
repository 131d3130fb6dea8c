import Foundation
import Glibc
import Testing

/// A Redis that hangs (redis-server stopped with SIGSTOP, always resumed by a `defer`): after
/// the first timeout the breaker opens, requests are spooled without waiting on Redis,
/// /healthz answers 503 naming Redis, and once Redis resumes the probe closes the breaker
/// and the spool drains, each notification applied exactly once.
@Suite("A Redis that hangs", .serialized)
struct RedisHangTests {
    @Test(
        "SIGSTOP: spooled at once behind an open breaker, /healthz 503, every notification applied once after SIGCONT")
    func stalledRedis() throws {
        let stack = try ServeStack(extraEnvironment: ["SIWA_REDIS_TIMEOUT_MS": "300", "SIWA_REDIS_RETRY_MS": "200"])
        defer { stack.shutdown() }
        let first = try stack.post(try stack.body(type: "consent-revoked", sub: "000040.h.0000"))
        try #require(first.jsonFields["status"] == "applied")

        stack.redis.send(SIGSTOP)
        defer { stack.redis.send(SIGCONT) }
        var subs: [String] = []
        for index in 1...12 {
            let sub = String(format: "000040.h.%04d", index)
            subs.append(sub)
            let response = try stack.post(try stack.body(type: "consent-revoked", sub: sub))
            #expect(response.status == 200)
            #expect(response.bodyText == #"{"status":"spooled"}"#)
        }
        // Only the first request met the timeout; the breaker opened once and the other
        // eleven never called Redis (their log lines say so).
        let serve = try #require(stack.serve)
        #expect(serve.logLines(event: "redis_circuit_opened").count == 1)
        let requestLines = serve.logText.split(separator: "\n").filter { $0.contains(#""outcome":"spooled""#) }
        #expect(requestLines.count == 12)
        #expect(requestLines.filter { $0.contains(#""redis_circuit":"open""#) }.count == 11)

        let health = try stack.health()
        #expect(health.status == 503)
        #expect(health.jsonFields["redis"] == "down")
        #expect(health.jsonFields["redis_circuit"] == "open")
        #expect(health.jsonFields["reason"]?.hasPrefix("Redis does not answer") == true)

        stack.redis.send(SIGCONT)
        let drained = try stack.waitUntil(timeout: 20) {
            try stack.health().status == 200
                && (try subs.allSatisfy { try stack.userHash(sub: $0)["consent_revoked_at"] != nil })
        }
        #expect(drained)
        #expect(serve.logLines(event: "redis_circuit_closed").count == 1)
        // Applied exactly once: one stream entry per notification, the first included.
        #expect(try stack.streamLength() == 13)
        // The one call that timed out was in Redis's socket when it stopped, and ran when it
        // resumed: the replay finds that call's own marker and says `stored`, not `duplicate`.
        // The passes' lines, once they account for all twelve.
        #expect(
            waitUntil(timeout: 10) {
                serve.replayedTotal("stored") + serve.replayedTotal("duplicate") + serve.replayedTotal("applied") >= 12
            }, "\(serve.logLines(event: "spool_replayed"))")
        #expect(serve.replayedTotal("stored") == 1, "\(serve.logLines(event: "spool_replayed"))")
        #expect(serve.replayedTotal("duplicate") == 0)
        #expect(serve.replayedTotal("applied") == 11)
        let healthAfter = try stack.health()
        #expect(healthAfter.jsonFields["spool_depth"] == "0")
        #expect(healthAfter.jsonFields["redis_circuit"] == nil)
    }

    @Test(
        "a Redis that does not answer PING: /healthz waits SIWA_HEALTH_PING_TIMEOUT_MS (2 s here), then 503 ping_timeout; /healthz/ready does not wait it; /healthz/live 200"
    )
    func healthPingTimeoutSetting() throws {
        // The Redis timeout is long, so the breaker's own PING stays pending (the breaker
        // does not open): only /healthz's bound decides when it answers.
        let stack = try ServeStack(extraEnvironment: [
            "SIWA_HEALTH_PING_TIMEOUT_MS": "2000", "SIWA_REDIS_TIMEOUT_MS": "60000",
        ])
        defer { stack.shutdown() }
        #expect(try stack.health().status == 200)

        stack.redis.send(SIGSTOP)
        defer { stack.redis.send(SIGCONT) }
        let started = ContinuousClock.now
        let health = try stack.request("GET", "/healthz")
        let waited = ContinuousClock.now - started
        #expect(health.status == 503)
        #expect(health.jsonFields["redis"] == "down")
        #expect(health.jsonFields["redis_circuit"] == "ping_timeout", "\(health.bodyText)")
        // Not before the bound: Redis is stopped, so nothing can answer the PING sooner.
        #expect(waited >= .milliseconds(2000), "answered after \(waited)")
        // Readiness waits 80 ms at most whatever the setting, then finds the spool takes
        // writes: ready. (Waiting the setting, it would take 2 s or more.)
        let readyStarted = ContinuousClock.now
        let ready = try stack.request("GET", "/healthz/ready")
        let readyWaited = ContinuousClock.now - readyStarted
        #expect(ready.status == 200, "\(ready.bodyText)")
        #expect(readyWaited < .milliseconds(2000), "ready answered after \(readyWaited)")
        #expect(try stack.request("GET", "/healthz/live").status == 200)
    }
}
