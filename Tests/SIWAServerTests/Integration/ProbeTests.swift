import Foundation
import SIWAFastCGIClient
import Synchronization
import Testing

/// `/healthz/live` and `/healthz/ready` on the real serve binary, a real Redis and the
/// JWKS stand-in for Apple, through each state an orchestrator must tell apart.
@Suite("Liveness and readiness probes, end to end", .serialized)
struct ProbeTests {
    static let live = #"{"status":"live"}"#
    static let ready = #"{"status":"ready"}"#

    static func notReady(_ reasons: [String]) -> String {
        #"{"status":"not_ready","reasons":["# + reasons.map { "\"\($0)\"" }.joined(separator: ",") + "]}"
    }

    @Test(
        "Redis down: live 200, ready 200 while the spool takes writes; spool unwritable too: ready 503 naming both, live 200; /healthz unchanged"
    )
    func redisDownThenSpoolUnwritable() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let live = try stack.request("GET", "/healthz/live")
        #expect(live.status == 200)
        #expect(live.bodyText == Self.live)
        #expect(live.header("Cache-Control") == "no-store")
        #expect(try stack.request("GET", "/healthz/ready").bodyText == Self.ready)
        let head = try stack.request("HEAD", "/healthz/ready")
        #expect(head.status == 200)
        for path in ["/healthz/live", "/healthz/ready"] {
            let posted = try stack.request("POST", path)
            #expect(posted.status == 405)
            #expect(posted.header("Allow") == "GET, HEAD")
        }

        stack.redis.stop()
        #expect(try stack.request("GET", "/healthz/live").status == 200)
        let readyWithoutRedis = try stack.request("GET", "/healthz/ready")
        #expect(readyWithoutRedis.status == 200)
        #expect(readyWithoutRedis.bodyText == Self.ready)
        // Today's /healthz still says Redis is down, as balancers and the units expect.
        #expect(try stack.health().status == 503)

        // As root, mode bits do not stop writes: make the spool immutable (ext4's chattr +i).
        let paths =
            try FileManager.default.contentsOfDirectory(atPath: stack.spoolDirectory)
            .map { stack.spoolDirectory + "/" + $0 } + [stack.spoolDirectory]
        try #require(ServeIntegrationTests.chattr("+i", paths), "chattr +i is needed to make the spool unwritable")
        defer { _ = ServeIntegrationTests.chattr("-i", paths) }
        let nowhere = try stack.request("GET", "/healthz/ready")
        #expect(nowhere.status == 503)
        #expect(nowhere.bodyText == Self.notReady(["redis_unreachable", "spool_unwritable"]))
        #expect(nowhere.header("Retry-After") == "30")
        #expect(try stack.request("HEAD", "/healthz/ready").status == 503)
        let stillLive = try stack.request("GET", "/healthz/live")
        #expect(stillLive.status == 200)
        #expect(stillLive.bodyText == Self.live)

        // Redis back, the spool still unwritable: a notification can be recorded, ready again.
        try stack.redis.start()
        #expect(stack.waitUntil(timeout: 5) { (try? stack.request("GET", "/healthz/ready").status) == 200 })
    }

    @Test(
        "Redis down, probes overlapping on every worker: each of 1,200 answers 200 ready (each spool check its own file)"
    )
    func overlappingProbesDuringAnOutage() throws {
        let workers = 8
        let stack = try ServeStack(extraEnvironment: ["SIWA_WORKERS": "\(workers)"])
        defer { stack.shutdown() }
        stack.redis.stop()
        let perClient = 150
        let answers = Mutex<[String: Int]>([:])
        let socketPath = stack.socketPath
        DispatchQueue.concurrentPerform(iterations: workers) { _ in
            for _ in 0..<perClient {
                let answer =
                    (try? FastCGIClient(.unixSocket(socketPath)).send(
                        params: FastCGIClient.params(method: "GET", uri: "/healthz/ready"))).map {
                        "\($0.status) \($0.bodyText)"
                    }
                answers.withLock { $0[answer ?? "no answer", default: 0] += 1 }
            }
        }
        #expect(answers.withLock { $0 } == ["200 \(Self.ready)": workers * perClient])
        // Every check removed its own file.
        let left = try FileManager.default.contentsOfDirectory(atPath: stack.spoolDirectory)
        #expect(left.filter { $0.hasPrefix(".ready-check") } == [])
    }

    @Test("no keys (the JWKS server down, no cache): ready 503 no_signing_keys, live 200")
    func noSigningKeys() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        // Apple's stand-in stops answering (its CA file stays, so serve starts and tries).
        stack.jwks.nginx.stop()
        try stack.startServe()
        let ready = try stack.request("GET", "/healthz/ready")
        #expect(ready.status == 503)
        #expect(ready.bodyText == Self.notReady(["no_signing_keys"]))
        let live = try stack.request("GET", "/healthz/live")
        #expect(live.status == 200)
        #expect(live.bodyText == Self.live)
    }

    @Test("the spool beyond the operator's limits: ready 503 spool_too_old, then spool_too_deep too; live 200")
    func spoolBeyondTheLimits() throws {
        let stack = try ServeStack(
            extraEnvironment: ["SIWA_READY_SPOOL_MAX_DEPTH": "1", "SIWA_READY_SPOOL_MAX_AGE_SECONDS": "3"])
        defer { stack.shutdown() }
        #expect(try stack.request("GET", "/metrics").bodyText.contains("\nsiwa_spool_oldest_age_seconds 0\n"))
        stack.redis.stop()
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000090.a.0001")).status == 200)
        // One record waits (the depth limit is 1): ready until it is older than 3 s (3, not
        // 1: the post and this probe each fsync, beside other test processes' fsyncs).
        let fresh = try stack.request("GET", "/healthz/ready")
        #expect(fresh.bodyText == Self.ready)
        var aged = ""
        #expect(
            stack.waitUntil(timeout: 10) {
                aged = (try? stack.request("GET", "/healthz/ready").bodyText) ?? ""
                return aged != Self.ready
            })
        #expect(aged == Self.notReady(["spool_too_old"]))
        let waited = try stack.request("GET", "/metrics").bodyText.split(separator: "\n")
            .first { $0.hasPrefix("siwa_spool_oldest_age_seconds ") }
        #expect((waited?.split(separator: " ").last).flatMap { Int($0) }.map { $0 >= 3 } == true, "\(waited ?? "")")

        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000090.a.0002")).status == 200)
        let deep = try stack.request("GET", "/healthz/ready")
        #expect(deep.status == 503)
        #expect(deep.bodyText == Self.notReady(["spool_too_deep", "spool_too_old"]))
        #expect(try stack.request("GET", "/healthz/live").status == 200)

        // Redis back: the spool drains and the instance is ready again.
        try stack.redis.start()
        #expect(stack.waitUntil(timeout: 10) { (try? stack.request("GET", "/healthz/ready").status) == 200 })
    }
}
