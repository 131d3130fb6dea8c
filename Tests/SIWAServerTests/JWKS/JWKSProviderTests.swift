import Foundation
import SIWAHTTPS
import SIWAKeys
import SIWAResponder
import SIWASupport
import SIWATestKit
import SIWAVerification
import Synchronization
import Testing

/// JWKSProvider against a real nginx: rotation, rate limit, single flight, failures, cache.
@Suite("JWKS provider")
struct JWKSProviderTests {
    private static func provider(
        _ server: JWKSTestServer, clock: JWKSTestClock, cacheFilePath: String? = nil, url: String? = nil,
        // A generous wait: these tests are about what a fetch brings, on a loaded machine.
        unknownKeyIDWaitLimit: Duration = .seconds(30), unknownKeyIDWaiters: Int = 1
    ) -> JWKSProvider {
        JWKSProvider(
            settings: JWKSProvider.Settings(
                url: url ?? server.keysURL, cacheFilePath: cacheFilePath, unknownKeyIDWaitLimit: unknownKeyIDWaitLimit,
                unknownKeyIDWaiters: unknownKeyIDWaiters),
            fetcher: server.fetcher, clock: clock.endpointClock)
    }

    private static func verificationCode(
        _ provider: JWKSProvider, _ body: [UInt8], now: Int64
    ) -> VerificationError.Code? {
        do {
            _ = try JWKSTestFixtures.verifier.verify(body: body, keys: provider, now: now)
            return nil
        } catch {
            return error.code
        }
    }

    @Test func startFetchesAndVerifies() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let key = try TestSigningKey.generate(keyID: "k1")
        try server.serve(try JWKSTestFixtures.document([key]))
        let clock = JWKSTestClock()
        let provider = Self.provider(server, clock: clock)
        #expect(provider.start() == .refreshed)
        #expect(provider.keys.usableKeyIDs == ["k1"])
        let verified = try JWKSTestFixtures.verifier.verify(
            body: try key.signedBody(issuedAt: clock.now), keys: provider, now: clock.now)
        #expect(verified.clientID == JWKSTestFixtures.clientID)
        #expect(verified.type == .consentRevoked)
        clock.advance(by: 42)
        let metrics = provider.metrics(now: clock.now)
        #expect(metrics.ageSeconds == 42)
        #expect(metrics.refreshFailures == 0)
        #expect(metrics.usableKeyCount == 1)
        #expect(server.keysRequestCount == 1)
    }

    @Test func rotationAddsANewKidAndRetiresAnOldOne() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let old = try TestSigningKey.generate(keyID: "old")
        let new = try TestSigningKey.generate(keyID: "new")
        try server.serve(try JWKSTestFixtures.document([old]))
        let clock = JWKSTestClock()
        let provider = Self.provider(server, clock: clock)
        #expect(provider.start() == .refreshed)

        // Apple publishes a new key and signs with it: the unknown kid triggers a refresh.
        try server.serve(try JWKSTestFixtures.document([old, new]))
        clock.advance(by: 61)
        #expect(Self.verificationCode(provider, try new.signedBody(issuedAt: clock.now), now: clock.now) == nil)
        #expect(provider.keys.usableKeyIDs == ["new", "old"])
        #expect(server.keysRequestCount == 2)

        // Apple retires the old key; the scheduled refresh drops it.
        try server.serve(try JWKSTestFixtures.document([new]))
        clock.advance(by: 3600)
        #expect(provider.refreshIfDue() == .refreshed)
        #expect(provider.keys.usableKeyIDs == ["new"])
        // Right after that fetch the unknown-kid refresh is rate-limited: no fetch has looked
        // for this kid, so it cannot be called unknown yet: 503, Apple retries.
        let oldBody = try old.signedBody(issuedAt: clock.now)
        #expect(Self.verificationCode(provider, oldBody, now: clock.now) == .keysUnavailable)
        #expect(server.keysRequestCount == 3)
        // Once a fetch made for it still lacks the kid: unknown, 401.
        clock.advance(by: 61)
        #expect(Self.verificationCode(provider, try old.signedBody(issuedAt: clock.now), now: clock.now) == .kidUnknown)
        #expect(NotificationResponder.httpStatus(for: VerificationError.Code.kidUnknown.failureClass) == 401)
        #expect(server.keysRequestCount == 4)
        #expect(Self.verificationCode(provider, try new.signedBody(issuedAt: clock.now), now: clock.now) == nil)
        #expect(server.keysRequestCount == 4)
    }

    @Test func unknownKidRefreshIsRateLimited() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let known = try TestSigningKey.generate(keyID: "known")
        let stranger = try TestSigningKey.generate(keyID: "stranger")
        try server.serve(try JWKSTestFixtures.document([known]))
        let clock = JWKSTestClock()
        let provider = Self.provider(server, clock: clock)
        provider.start()
        let start = clock.now
        #expect(server.keysRequestCount == 1)

        // Within 60 s of the start fetch: no fetch.
        clock.advance(by: 59)
        #expect(provider.refreshForUnknownKey() == .skipped)
        #expect(server.keysRequestCount == 1)
        // 61 s after: one fetch.
        let body = try stranger.signedBody(issuedAt: start)
        clock.advance(by: 2)
        #expect(Self.verificationCode(provider, body, now: start + 61) == .kidUnknown)
        #expect(server.keysRequestCount == 2)
        // Again 29 s later: no fetch, so the kid is not yet known to be unknown: 503.
        clock.advance(by: 29)
        #expect(Self.verificationCode(provider, body, now: start + 90) == .keysUnavailable)
        clock.advance(by: 30)
        #expect(provider.refreshForUnknownKey() == .skipped)
        #expect(server.keysRequestCount == 2)
        // 60 s after the second fetch: the next one.
        clock.advance(by: 1)
        #expect(provider.refreshForUnknownKey() == .refreshed)
        #expect(server.keysRequestCount == 3)
    }

    @Test func concurrentUnknownKidRefreshesShareOneFetch() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let keys = try ["k1", "k2", "k3"].map { try TestSigningKey.generate(keyID: $0) }
        let document = try JWKSTestFixtures.document(keys)
        try server.serve(document)
        let clock = JWKSTestClock()
        // The slow location sends 600 bytes a second: the fetch takes about two seconds,
        // long enough for every thread to arrive while it runs. Every thread may wait, and
        // long enough: this proves the sharing (the bound on waiting is proven apart).
        #expect(document.count > 1000)
        let provider = Self.provider(
            server, clock: clock, url: "https://localhost:\(server.nginx.httpsPort)/slow/keys.json",
            unknownKeyIDWaitLimit: .seconds(60), unknownKeyIDWaiters: 8)
        let threadCount = 8
        let outcomes = Mutex<[JWKSRefreshOutcome]>([])
        let finished = DispatchSemaphore(value: 0)
        let ready = DispatchSemaphore(value: 0)
        let go = DispatchSemaphore(value: 0)
        // Each call's start and end (monotonic): the calls must overlap for one fetch to be shared.
        let spans = Mutex<[(start: UInt64, end: UInt64)]>([])
        for _ in 0..<threadCount {
            Thread {
                ready.signal()
                go.wait()
                let start = DispatchTime.now().uptimeNanoseconds
                let outcome = provider.refreshForUnknownKey()
                let end = DispatchTime.now().uptimeNanoseconds
                spans.withLock { $0.append((start, end)) }
                outcomes.withLock { $0.append(outcome) }
                finished.signal()
            }.start()
        }
        // Every thread is running before any call starts: they leave the gate together.
        for _ in 0..<threadCount {
            #expect(ready.wait(timeout: .now() + 30) == .success)
        }
        for _ in 0..<threadCount { go.signal() }
        for _ in 0..<threadCount {
            #expect(finished.wait(timeout: .now() + 30) == .success)
        }
        // All eight were in refreshForUnknownKey at one moment: the last start precedes the first end.
        let recorded = spans.withLock { $0 }
        #expect(recorded.count == threadCount)
        #expect(recorded.map(\.start).max()! < recorded.map(\.end).min()!)
        #expect(outcomes.withLock { $0 } == Array(repeating: .refreshed, count: threadCount))
        #expect(server.nginx.requestCount(path: "/slow/keys.json") == 1)
        #expect(provider.keys.usableKeyIDs == ["k1", "k2", "k3"])
    }

    @Test func serverDownKeepsTheLastGoodKeysAndReportsFailure() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let key = try TestSigningKey.generate(keyID: "k1")
        let stranger = try TestSigningKey.generate(keyID: "stranger")
        try server.serve(try JWKSTestFixtures.document([key]))
        let clock = JWKSTestClock()
        let provider = Self.provider(server, clock: clock)
        #expect(provider.start() == .refreshed)
        server.nginx.stop()

        clock.advance(by: 3600)
        #expect(provider.refreshIfDue() == .failed)
        #expect(provider.keys.usableKeyIDs == ["k1"])
        let metrics = provider.metrics(now: clock.now)
        #expect(metrics.refreshFailures == 1)
        #expect(metrics.ageSeconds == 3600)
        // The failure keeps the fetch's own error, not only its text.
        #expect(metrics.lastFailure?.code == .fetchFailed)
        #expect((metrics.lastFailure?.cause as? HTTPSFetchError)?.code == .connectFailed)
        #expect(metrics.lastFailure?.description.contains("connect_failed") == true)
        // A known kid still verifies.
        #expect(Self.verificationCode(provider, try key.signedBody(issuedAt: clock.now), now: clock.now) == nil)
        // After a failed refresh, the retry comes sooner than the hourly schedule.
        clock.advance(by: 59)
        #expect(provider.refreshIfDue() == .skipped)
        clock.advance(by: 1)
        #expect(provider.refreshIfDue() == .failed)
        // An unknown kid cannot be judged while Apple's keys are out of reach: 503.
        clock.advance(by: 61)
        let code = Self.verificationCode(provider, try stranger.signedBody(issuedAt: clock.now), now: clock.now)
        #expect(code == .keysUnavailable)
        #expect(code.map { NotificationResponder.httpStatus(for: $0.failureClass) } == 503)
        #expect(provider.metrics(now: clock.now).refreshFailures == 3)
    }

    @Test func unusableDocumentsKeepTheLastGoodKeys() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let key = try TestSigningKey.generate(keyID: "k1")
        let good = try JWKSTestFixtures.document([key])
        try server.serve(good)
        let cache = server.directory.appendingPathComponent("cache").appendingPathComponent("jwks.json").path
        try FileManager.default.createDirectory(
            atPath: server.directory.appendingPathComponent("cache").path, withIntermediateDirectories: true)
        let clock = JWKSTestClock()
        let provider = Self.provider(server, clock: clock, cacheFilePath: cache)
        #expect(provider.start() == .refreshed)
        let weak = #"{"keys":[{"kty":"EC","kid":"ec","crv":"P-256","x":"AA","y":"AA"}]}"#
        for bad in [#"{"keys":[]}"#, "not json", #"{"kees":[]}"#, weak] {
            try server.serve(Array(bad.utf8))
            clock.advance(by: 3600)
            #expect(provider.refreshIfDue() == .failed, "\(bad)")
            #expect(provider.keys.usableKeyIDs == ["k1"])
        }
        #expect(provider.metrics(now: clock.now).refreshFailures == 4)
        // Nothing unusable ever reaches the cache file.
        #expect(try JWKSCacheFile(path: cache).load()?.bytes == good)
    }

    @Test func missingCacheFileAtStartIsFilledByTheFetch() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let document = try JWKSTestFixtures.document([TestSigningKey.generate(keyID: "k1")])
        try server.serve(document)
        let cache = server.directory.appendingPathComponent("jwks-cache.json").path
        #expect(!FileManager.default.fileExists(atPath: cache))
        let provider = Self.provider(server, clock: JWKSTestClock(), cacheFilePath: cache)
        #expect(provider.start() == .refreshed)
        #expect(provider.metrics(now: provider.now()).lastFailure == nil)
        #expect(try JWKSCacheFile(path: cache).load()?.bytes == document)
    }

    @Test func startWithoutNetworkUsesTheCacheFile() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let key = try TestSigningKey.generate(keyID: "cached")
        let cache = server.directory.appendingPathComponent("jwks-cache.json").path
        try JWKSCacheFile(path: cache).store(try JWKSTestFixtures.document([key]))
        server.nginx.stop()
        let clock = JWKSTestClock()
        let provider = Self.provider(server, clock: clock, cacheFilePath: cache)
        #expect(provider.start() == .failed)
        #expect(provider.keys.usableKeyIDs == ["cached"])
        #expect(Self.verificationCode(provider, try key.signedBody(issuedAt: clock.now), now: clock.now) == nil)
        let metrics = provider.metrics(now: JWKSTestFixtures.wallClock + 5)
        #expect(metrics.refreshFailures == 1)
        #expect((5...10).contains(metrics.ageSeconds ?? -1))
    }

    @Test func noCacheAndNoNetworkMeansNoKeysAndRetryable() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let key = try TestSigningKey.generate(keyID: "k1")
        server.nginx.stop()
        let clock = JWKSTestClock()
        let provider = Self.provider(server, clock: clock)
        #expect(provider.start() == .failed)
        #expect(provider.keys.isEmpty)
        #expect(provider.metrics(now: clock.now).ageSeconds == nil)
        let code = Self.verificationCode(provider, try key.signedBody(issuedAt: clock.now), now: clock.now)
        #expect(code == .keysUnavailable)
    }

    @Test func refresherKeepsTheSchedule() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        try server.serve(try JWKSTestFixtures.document([TestSigningKey.generate(keyID: "k1")]))
        let clock = JWKSTestClock()
        let provider = Self.provider(server, clock: clock)
        provider.start()
        let services = ServiceGroup()
        services.start(JWKSRefresher(provider: provider, checkInterval: .milliseconds(50)))
        defer { services.stop(until: .now + .seconds(10)) }
        // No early fetch: once the refresher has checked the schedule several times (each
        // check reads the monotonic clock once), still only the start's fetch. The bound is
        // for a loaded machine; at 50 ms a check, five take a quarter of a second.
        let checksBefore = clock.monotonicReadCount
        let checkDeadline = Date(timeIntervalSinceNow: 30)
        while clock.monotonicReadCount < checksBefore + 5 && Date() < checkDeadline { usleep(20_000) }
        #expect(clock.monotonicReadCount >= checksBefore + 5)
        #expect(server.keysRequestCount == 1)
        clock.advance(by: 3600)
        // Bounded for a loaded machine: the refresher checks every 50 ms, so this ends at once.
        let deadline = Date(timeIntervalSinceNow: 30)
        while server.keysRequestCount < 2 && Date() < deadline { usleep(20_000) }
        #expect(services.stop(until: .now + .seconds(10)))
        #expect(server.keysRequestCount == 2)
        #expect(provider.metrics(now: clock.now).ageSeconds == 0)
    }
}
