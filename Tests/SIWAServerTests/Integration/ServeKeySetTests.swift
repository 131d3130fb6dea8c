import Foundation
import Glibc
import SIWAFastCGIClient
import SIWAJSON
import SIWATestKit
import Synchronization
import Testing

/// The real `serve` and its own key set: a broken entry in Apple's JWKS, made-up kids while
/// the JWKS host is slow, something other than a file at `SIWA_JWKS_CACHE`, a SIGHUP reload
/// that hangs. The JWKS host is a local nginx under a test CA, standing in for Apple.
@Suite("serve: the key set", .serialized)
struct ServeKeySetTests {
    /// `key`'s JWK twice under its kid, the second with another key's numbers: a bad merge.
    static func duplicatedKidDocument(_ key: TestSigningKey, other: TestSigningKey) throws -> [UInt8] {
        guard case .object(var impostor) = try other.publicJWK() else { fatalError("a JWK is an object") }
        impostor["kid"] = .string(key.keyID)
        return Array(JSONWriter.object([("keys", .array([try key.publicJWK(), .object(impostor)]))]).utf8)
    }

    static func metric(_ stack: ServeStack, _ name: String) throws -> String? {
        try stack.request("GET", "/metrics").bodyText.split(separator: "\n")
            .first { $0.hasPrefix("\(name) ") }.map { String($0.dropFirst(name.count + 1)) }
    }

    @Test("a broken entry under the kid in use displaces nothing: genuine tokens still apply, across a restart")
    func brokenEntryKeepsTheHeldKey() throws {
        let stack = try ServeStack(extraEnvironment: ["SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": "1"])
        defer { stack.shutdown() }
        let serve = try #require(stack.serve)
        #expect(try Self.metric(stack, "siwa_jwks_unusable_keys") == "0")
        let other = try TestSigningKey.generate(keyID: "test-other")
        try stack.jwks.serve(try Self.duplicatedKidDocument(stack.key, other: other))
        // A made-up kid asks for a fetch (at most once a second): posted until the fetch
        // has brought the broken document, which the log line says (bounded).
        let madeUp = try TestSigningKey.generate(keyID: "made-up")
        let madeUpBody = try stack.body(type: "consent-revoked", sub: "000040.a.0000", signedWith: madeUp)
        #expect(
            try stack.waitUntil(timeout: 20) {
                _ = try stack.post(madeUpBody)
                return !serve.logLines(event: "jwks_keys_unusable").isEmpty
            })
        let line = serve.logLines(event: "jwks_keys_unusable").first ?? ""
        #expect(line.contains(#""level":"warning""#), "\(line)")
        #expect(line.contains(#""kept":["\#(stack.key.keyID)"]"#), "\(line)")
        #expect(line.contains("key_invalid"), "\(line)")
        #expect(try Self.metric(stack, "siwa_jwks_unusable_keys") == "1")
        #expect(try Self.metric(stack, "siwa_jwks_keys") == "1")
        let genuine = try stack.post(try stack.body(type: "consent-revoked", sub: "000040.a.0001"))
        #expect(genuine.bodyText == #"{"status":"applied"}"#)

        // A restart while the JWKS host still serves the broken document: the cache file
        // kept the held key, so genuine tokens still apply.
        serve.terminate()
        #expect(serve.waitForExit(timeout: 15) == 0)
        try stack.startServe()
        let afterRestart = try stack.post(try stack.body(type: "consent-revoked", sub: "000040.a.0002"))
        #expect(afterRestart.bodyText == #"{"status":"applied"}"#)
    }

    @Test("no key held for the kid and its entry broken: 503 key_invalid, Redis untouched, and a fixed host ends it")
    func brokenEntryWithoutAHeldKeyIsRetryable() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let other = try TestSigningKey.generate(keyID: "test-other")
        let spare = try TestSigningKey.generate(keyID: "test-spare")
        // The document has one usable key (spare), so it is taken; the kid in use is broken.
        guard
            case .object(var members) = try StrictJSONParser.parse(
                try Self.duplicatedKidDocument(stack.key, other: other)),
            case .array(let keys)? = members["keys"]
        else { fatalError("a JWKS") }
        members["keys"] = .array(keys + [try spare.publicJWK()])
        try stack.jwks.serve(Array(JSONWriter.serialize(.object(members)).utf8))
        let environment = stack.environment.merging(["SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": "1"]) { $1 }
        stack.serve = try ServeProcess(
            environment: environment, socketPath: stack.socketPath,
            logURL: stack.directory.appendingPathComponent("serve.log"))
        let before = try stack.redisSnapshot()
        let body = try stack.body(type: "consent-revoked", sub: "000041.a.0001")
        let refused = try stack.post(body)
        #expect(refused.status == 503)
        #expect(refused.jsonFields == ["status": "unavailable", "error": "key_invalid"])
        #expect(refused.header("Retry-After") == "30")
        #expect(try stack.redisSnapshot() == before)
        // The JWKS host is fixed: the refresh the refusal asks for (once a second) brings it.
        try stack.jwks.serve(Array(TestSigningKey.jwksDocument([stack.key, spare]).utf8))
        var answer: FastCGIClient.Response?
        #expect(
            try stack.waitUntil(timeout: 20) {
                answer = try stack.post(body)
                return answer?.status != 503
            })
        #expect(answer?.bodyText == #"{"status":"applied"}"#)
    }

    @Test(
        "made-up kids from 8 threads while the JWKS host is slow: genuine requests and /healthz never wait for it",
        arguments: [3, 1])
    func madeUpKidsDoNotHoldTheWorkers(workers: Int) throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        // The cache file holds the genuine key; the host answers 600 bytes a second, and the
        // document is padded so that every fetch runs into the 5 s fetch timeout.
        let document = try TestSigningKey.jwksDocument([stack.key])
        try document.write(
            toFile: stack.directory.appendingPathComponent("jwks-cache.json").path, atomically: true, encoding: .utf8)
        try stack.jwks.serve(Array((document + String(repeating: " ", count: 6000)).utf8))
        let slowURL = "https://localhost:\(stack.jwks.nginx.httpsPort)/slow/keys.json"
        let environment = stack.environment.merging([
            "SIWA_JWKS_URL": slowURL, "SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": "1", "SIWA_JWKS_TIMEOUT_SECONDS": "5",
            "SIWA_WORKERS": String(workers),
        ]) { $1 }
        stack.serve = try ServeProcess(
            environment: environment, socketPath: stack.socketPath,
            logURL: stack.directory.appendingPathComponent("serve.log"), timeout: 30)

        let stop = Mutex(false)
        let madeUpAnswers = Mutex<[String]>([])
        let finished = DispatchSemaphore(value: 0)
        let socketPath = stack.socketPath
        // The senders run until the fetches have been seen (or the deadline below has
        // passed): a bound of a count alone ran out first on a fast run, the made-up kids
        // stopped, and with them the fetches the test waits for.
        let sendersDeadline = ContinuousClock.now + .seconds(90)
        for thread in 0..<8 {
            let key = try TestSigningKey.generate(keyID: "made-up-\(thread)")
            let body = try stack.body(type: "consent-revoked", sub: "000042.m.000\(thread)", signedWith: key)
            Thread {
                defer { finished.signal() }
                for _ in 0..<2_000_000 {
                    if stop.withLock({ $0 }) || ContinuousClock.now >= sendersDeadline { break }
                    let answer = try? FastCGIClient(.unixSocket(socketPath)).send(
                        params: FastCGIClient.params(
                            method: "POST", uri: "/apple/notifications", body: body, contentType: "application/json"),
                        body: body)
                    madeUpAnswers.withLock {
                        $0.append(answer.map { "\($0.status) \($0.jsonFields["error"] ?? "")" } ?? "no answer")
                    }
                }
            }.start()
        }
        // While the made-up kids keep fetches running (two whole slow fetches pass from here:
        // the access log counts a fetch once it ends), genuine requests and /healthz are
        // timed, at least three rounds. Counted from here, not from the start: on a loaded
        // machine the start fetch and the first made-up kids' fetches (5 s each) could end
        // before the first round, and no round ran.
        var slowest: Duration = .zero
        var genuineAnswers: [String] = []
        let deadline = ContinuousClock.now + .seconds(60)
        let fetchesBefore = stack.jwks.nginx.requestCount(path: "/slow/keys.json")
        var round = 0
        while ContinuousClock.now < deadline
            && (round < 3 || stack.jwks.nginx.requestCount(path: "/slow/keys.json") < fetchesBefore + 2)
        {
            round += 1
            let started = ContinuousClock.now
            let genuine = try stack.post(
                try stack.body(type: "consent-revoked", sub: "000042.g.\(String(format: "%04d", round))"))
            // One /healthz timed; a 503 only for a PING past its bound is asked again untimed.
            var health = try stack.request("GET", "/healthz")
            slowest = max(slowest, ContinuousClock.now - started)
            if health.jsonFields["redis_circuit"] == "ping_timeout" { health = try stack.health() }
            genuineAnswers.append("\(genuine.bodyText) \(health.status)")
        }
        stop.withLock { $0 = true }
        for _ in 0..<8 { #expect(finished.wait(timeout: .now() + 60) == .success) }
        #expect(stack.jwks.nginx.requestCount(path: "/slow/keys.json") >= fetchesBefore + 2, "the fetches ran")
        #expect(round >= 3)
        #expect(Set(genuineAnswers) == [#"{"status":"applied"} 200"#])
        // A worker that waited for a fetch would show here as about 5 s; a free one as milliseconds.
        #expect(slowest < .milliseconds(1500), "slowest genuine request plus /healthz: \(slowest)")
        let answers = madeUpAnswers.withLock { $0 }
        #expect(!answers.isEmpty)
        #expect(Set(answers) == ["503 keys_unavailable"])
    }

    @Test("the cache file is written after the fetch lands: a request for a new kid does not wait for its fsyncs")
    func cacheWriteAfterTheFetchLands() throws {
        let strace = "/usr/bin/strace"
        try #require(
            FileManager.default.isExecutableFile(atPath: strace), "strace is needed (scripts/install-deps installs it)")
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        // The cache file in a directory of its own, whose fsync strace holds for 6 s each
        // time (a slow disk): longer than the 2 s a request waits for a fetch.
        let keysDirectory = stack.directory.appendingPathComponent("keys").path
        try FileManager.default.createDirectory(atPath: keysDirectory, withIntermediateDirectories: false)
        let cachePath = keysDirectory + "/jwks.json"
        let environment = stack.environment.merging([
            "SIWA_JWKS_CACHE": cachePath, "SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": "1",
        ]) { $1 }
        stack.serve = try ServeProcess(
            environment: environment, socketPath: stack.socketPath,
            logURL: stack.directory.appendingPathComponent("serve.log"), timeout: 30,
            launcher: [
                strace, "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf", "-e", "trace=fsync", "-e", "signal=none",
                "-P", keysDirectory, "-e", "inject=fsync:delay_enter=6000000", "--",
            ])
        let tracer = try #require(stack.serve?.process.processIdentifier)
        let serve = try #require(SpoolDurabilityProofTests.children(of: tracer).first, "strace has no child")
        defer { kill(serve, SIGKILL) }
        // Apple rotates a key in; a token under it asks for a fetch, which brings it.
        let next = try TestSigningKey.generate(keyID: "test-apple-key-rotated")
        try stack.jwks.serve(Array(TestSigningKey.jwksDocument([stack.key, next]).utf8))
        let started = ContinuousClock.now
        let rotated = try stack.post(try stack.body(type: "consent-revoked", sub: "000044.c.0001", signedWith: next))
        let took = ContinuousClock.now - started
        // Had the file been written before the fetch landed, the request would have waited
        // out its whole 2 s bound (the key is then found all the same); a local fetch takes
        // milliseconds.
        #expect(rotated.bodyText == #"{"status":"applied"}"#)
        #expect(took < .milliseconds(1900), "\(took)")
        // The file is written all the same, once the slow fsync returns.
        #expect(
            stack.waitUntil(timeout: 30) {
                ((try? String(contentsOfFile: cachePath, encoding: .utf8)) ?? "").contains(next.keyID)
            })
    }

    @Test("a FIFO at SIWA_JWKS_CACHE is not read: serve starts, says why, and fetches the keys")
    func fifoAtTheCachePath() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let cachePath = stack.directory.appendingPathComponent("jwks-cache.json").path
        #expect(mkfifo(cachePath, 0o600) == 0)
        // ServeProcess waits (15 s) for the socket: a blocking open of the FIFO never returns.
        try stack.startServe()
        let loaded = stack.serve?.logLines(event: "jwks_loaded").first ?? ""
        #expect(loaded.contains("cache_not_regular_file"), "\(loaded)")
        #expect(loaded.contains(#""keys":1"#), "\(loaded)")
        #expect(try stack.health().status == 200)
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: "000043.f.0001")).bodyText
                == #"{"status":"applied"}"#)
        // The fetch at start wrote the cache file over the FIFO (a rename): a FIFO is put
        // back, and a SIGHUP reload reads nothing from it either, and says so.
        try FileManager.default.removeItem(atPath: cachePath)
        #expect(mkfifo(cachePath, 0o600) == 0)
        let serve = try #require(stack.serve)
        kill(serve.process.processIdentifier, SIGHUP)
        #expect(stack.waitUntil(timeout: 10) { !serve.logLines(event: "jwks_cache_reloaded").isEmpty })
        let reloaded = serve.logLines(event: "jwks_cache_reloaded").first ?? ""
        #expect(reloaded.contains("cache_not_regular_file"), "\(reloaded)")
        #expect(reloaded.contains(#""keys":1"#), "\(reloaded)")
    }

    @Test("a SIGHUP reload that hangs does not keep SIGTERM from stopping serve within its deadline")
    func hungReloadDoesNotBlockTheStop() throws {
        let strace = "/usr/bin/strace"
        try #require(
            FileManager.default.isExecutableFile(atPath: strace), "strace is needed (scripts/install-deps installs it)")
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let cachePath = stack.directory.appendingPathComponent("jwks-cache.json").path
        // strace holds a thread's second open of the cache file for 120 s: a reload stuck in
        // the kernel, as on a hung network file system. (strace counts per thread: start-up
        // opens the file once; a reload opens it twice, to see whether it exists, then to load it.)
        stack.launcher = [
            strace, "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf", "-e", "trace=openat", "-e", "signal=none", "-P",
            cachePath,
            "-e", "inject=openat:delay_enter=120000000:when=2", "--",
        ]
        try stack.startServe()
        let tracer = try #require(stack.serve?.process.processIdentifier)
        let serve = try #require(SpoolDurabilityProofTests.children(of: tracer).first, "strace has no child")
        // Killing strace would leave serve running untraced: serve itself is killed if it is left.
        defer { kill(serve, SIGKILL) }
        kill(serve, SIGHUP)
        // The reload is stuck: no jwks_cache_reloaded line comes (checked for a while, then on).
        #expect(
            !(stack.waitUntil(timeout: 2) { !(stack.serve?.logLines(event: "jwks_cache_reloaded").isEmpty ?? true) }))
        #expect(try stack.health().status == 200)
        kill(serve, SIGTERM)
        // SIWA_SHUTDOWN_TIMEOUT_SECONDS is 10 by default; with nothing in flight serve stops at
        // once. A thread held in a system call keeps the kernel from reaping the process (as
        // a thread in a hung file system would), so the proof is serve's own `stopped` line.
        // With the reload on the signal thread, the SIGTERM would never be read: no `stopping`.
        #expect(
            stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "stopped").count == 1 },
            "serve has not stopped 15 s after SIGTERM")
        #expect(stack.serve?.logLines(event: "stopping").count == 1)
        #expect(stack.serve?.logLines(event: "stopped").first?.contains(#""drained":true"#) == true)
        #expect(stack.serve?.logLines(event: "jwks_cache_reloaded").isEmpty == true)
    }
}
