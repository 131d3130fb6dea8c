import Foundation
import Glibc
import SIWATestKit
import Testing

/// Signals and restarts of the real `serve`: SIGHUP reloads the JWKS cache file and
/// stops nothing; a socket file left by a crash never blocks the next start.
@Suite("serve: signals and restarts", .serialized)
struct ServeSignalTests {
    @Test("SIGHUP reloads the JWKS cache file, logs it, and serve keeps serving")
    func hangUpReloadsTheCacheFile() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        guard let serve = stack.serve else { throw ServeProcess.StartFailure(description: "no serve") }
        // An operator puts a key into the cache file that the JWKS server does not publish.
        // No fetch can bring it (an unknown kid refreshes at most once a minute, and the one
        // at start used that), so only reading the file makes it verify.
        let placed = try TestSigningKey.generate(keyID: "test-apple-key-placed")
        let cachePath = stack.directory.appendingPathComponent("jwks-cache.json").path
        try TestSigningKey.jwksDocument([stack.key, placed]).write(toFile: cachePath, atomically: true, encoding: .utf8)

        kill(serve.process.processIdentifier, SIGHUP)
        #expect(stack.waitUntil(timeout: 10) { !serve.logLines(event: "jwks_cache_reloaded").isEmpty })
        let line = serve.logLines(event: "jwks_cache_reloaded").first ?? ""
        #expect(line.contains(#""keys":2"#), "\(line)")
        #expect(line.contains(#""failure":null"#), "\(line)")
        #expect(serve.process.isRunning)
        let placedPost = try stack.post(
            try stack.body(type: "consent-revoked", sub: "000031.a.0001", signedWith: placed))
        #expect(placedPost.bodyText == #"{"status":"applied"}"#)
        #expect(try stack.health().status == 200)

        // A second SIGHUP, with the file now unreadable as a JWKS: the held keys stay.
        try "not a jwks".write(toFile: cachePath, atomically: true, encoding: .utf8)
        kill(serve.process.processIdentifier, SIGHUP)
        #expect(stack.waitUntil(timeout: 10) { serve.logLines(event: "jwks_cache_reloaded").count == 2 })
        #expect(serve.logLines(event: "jwks_cache_reloaded").last?.contains(#""level":"warning""#) == true)
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: "000031.a.0002", signedWith: placed)).status
                == 200)
        #expect(serve.logLines(event: "stopped").isEmpty)

        // SIGTERM still stops it cleanly.
        serve.terminate()
        #expect(serve.waitForExit(timeout: 15) == 0)
    }

    @Test("a socket file left by a crash (SIGKILL) does not block the next start")
    func staleSocketAfterCrash() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        // serve listens before it writes `started`: the crash is of a serve that has started,
        // so the second start below is the second `started` (killed sooner, the first serve
        // may never have written its line: the count below then read 1 under load).
        #expect(stack.waitUntil(timeout: 10) { stack.serve?.logLines(event: "started").count == 1 })
        stack.serve?.kill()
        // The crash left the socket file behind, and nobody listens on it.
        var info = stat()
        #expect(lstat(stack.socketPath, &info) == 0 && info.st_mode & S_IFMT == S_IFSOCK)
        #expect(!ServeProcess.accepts(stack.socketPath))
        try stack.startServe()
        #expect(try stack.health().status == 200)
        // serve listens before it writes `started` (a replay at start must not keep nginx
        // waiting), so the line may follow the first answer: wait for it.
        #expect(stack.waitUntil(timeout: 10) { stack.serve?.logLines(event: "started").count == 2 })
    }
}

/// A cold start without keys: no cache file, and the JWKS host not serving yet.
@Suite("serve: Apple's keys at a cold start")
struct ServeColdStartTests {
    @Test("while no key is held the fetch is retried with a short backoff: keys load soon after the host is up")
    func keysLoadSoonAfterTheHostComesUp() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        stack.serve?.kill()
        try? FileManager.default.removeItem(atPath: stack.directory.appendingPathComponent("jwks-cache.json").path)
        // The JWKS host answers 404 until the keys are put back: every fetch fails.
        let keysFile = stack.jwks.directory.appendingPathComponent("www/keys.json").path
        let document = try Data(contentsOf: URL(fileURLWithPath: keysFile))
        try FileManager.default.removeItem(atPath: keysFile)
        try stack.startServe()
        #expect(stack.serve?.logLines(event: "jwks_loaded").last?.contains(#""keys":0"#) == true)
        #expect(try stack.health().status == 503)
        // Three failures: the start fetch and the retries after 1 s and 2 s, so the backoff
        // has grown to 4 s. Awaited, not slept for: the bound is for a loaded machine.
        #expect(
            try stack.waitUntil(timeout: 30) {
                let metrics = try stack.request("GET", "/metrics").bodyText
                return (ServeClaimTests.metric("siwa_jwks_refresh_failures_total", in: metrics) ?? 0) >= 3
            })
        try stack.jwks.serve(Array(document))
        let up = ContinuousClock.now
        // Without the cold-start backoff the next try would come after the 60 s failed-refresh
        // interval. The bound is generous for a loaded machine; the backoff here is 4 s.
        #expect(try stack.waitUntil(timeout: 20) { try stack.health().status == 200 })
        #expect(ContinuousClock.now - up < .seconds(20))
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000032.c.0001")).status == 200)
    }
}
