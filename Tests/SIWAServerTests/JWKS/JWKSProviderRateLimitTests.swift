import Foundation
import SIWASupport
import SIWATestKit
import SIWAVerification
import Synchronization
import Testing

@testable import SIWAKeys

/// JWKSProvider's rate limits in process: the fetch is an in-process double, the clock is
/// the test's. The same limits against a real HTTPS server are in `JWKSProviderTests`.
@Suite("JWKS provider rate limits (in process)")
struct JWKSProviderRateLimitTests {
    static let start: Int64 = 1_800_000_000

    static func provider(_ fetcher: JWKSFetcherDouble, clock: JWKSTestClock) -> JWKSProvider {
        JWKSProvider(
            settings: JWKSProvider.Settings(
                url: "https://jwks.invalid/auth/keys", refreshInterval: .seconds(3600),
                failedRefreshRetryInterval: .seconds(60), unknownKeyIDRefreshInterval: .seconds(60),
                unknownKeyIDWaitLimit: .seconds(30)),
            fetcher: fetcher, clock: clock.endpointClock)
    }

    /// A provider over a fetcher serving `keys`, on a test clock at `start`, started once.
    struct Started {
        let fetcher = JWKSFetcherDouble()
        let clock = JWKSTestClock(JWKSProviderRateLimitTests.start)
        let provider: JWKSProvider
        /// What the start's fetch did.
        let startOutcome: JWKSRefreshOutcome

        init(serving keys: [TestSigningKey]) throws {
            fetcher.serve(try JWKSTestFixtures.document(keys))
            provider = JWKSProviderRateLimitTests.provider(fetcher, clock: clock)
            startOutcome = provider.start()
        }
    }

    @Test("scheduled refresh: not before the interval, then one fetch")
    func scheduledRefresh() throws {
        let known = try TestSigningKey.generate(keyID: "known")
        let started = try Started(serving: [known])
        let (fetcher, clock, provider) = (started.fetcher, started.clock, started.provider)
        #expect(started.startOutcome == .refreshed)
        #expect(fetcher.fetchCount == 1)
        clock.advance(by: 3599)
        #expect(provider.refreshIfDue() == .skipped)
        #expect(fetcher.fetchCount == 1)
        clock.advance(by: 1)
        #expect(provider.refreshIfDue() == .refreshed)
        #expect(fetcher.fetchCount == 2)
        clock.advance(by: 1)
        #expect(provider.refreshIfDue() == .skipped)
        #expect(fetcher.fetchCount == 2)
    }

    @Test("after a failed fetch the scheduled refresh retries after the shorter interval; the keys stay")
    func failedRefreshRetry() throws {
        let known = try TestSigningKey.generate(keyID: "known")
        let started = try Started(serving: [known])
        let (fetcher, clock, provider) = (started.fetcher, started.clock, started.provider)
        fetcher.serve(nil)
        clock.advance(by: 3600)
        #expect(provider.refreshIfDue() == .failed)
        #expect(provider.keys.usableKeyIDs == ["known"])
        #expect(provider.metrics(now: clock.now).lastFailure != nil)
        clock.advance(by: 59)
        #expect(provider.refreshIfDue() == .skipped)
        #expect(fetcher.fetchCount == 2)
        clock.advance(by: 1)
        #expect(provider.refreshIfDue() == .failed)
        #expect(fetcher.fetchCount == 3)
    }

    @Test("a wall clock stepped back stops neither the scheduled refresh nor the unknown-kid refresh")
    func wallClockSteppedBack() throws {
        let known = try TestSigningKey.generate(keyID: "known")
        let stranger = try TestSigningKey.generate(keyID: "stranger")
        let started = try Started(serving: [known])
        let (fetcher, clock, provider) = (started.fetcher, started.clock, started.provider)
        // An hour passes, and the wall clock is set back two hours on the way.
        clock.advance(by: 3600)
        clock.stepWallClock(by: -7200)
        #expect(provider.refreshIfDue() == .refreshed)
        #expect(fetcher.fetchCount == 2)
        // A minute later (and the wall clock back another day), an unknown kid is fetched for.
        fetcher.serve(try JWKSTestFixtures.document([known, stranger]))
        clock.advance(by: 60)
        clock.stepWallClock(by: -86400)
        #expect(provider.refreshForUnknownKey() == .refreshed)
        #expect(fetcher.fetchCount == 3)
        #expect(provider.keys.usableKeyIDs == ["known", "stranger"])
        // The age shown is wall time: the clock said so.
        #expect(provider.metrics(now: clock.now).ageSeconds == 0)
    }

    @Test("a wall clock stepped forward does not bring a refresh early")
    func wallClockSteppedForward() throws {
        let started = try Started(serving: [TestSigningKey.generate(keyID: "known")])
        let (fetcher, clock, provider) = (started.fetcher, started.clock, started.provider)
        clock.stepWallClock(by: 86400)
        #expect(provider.refreshIfDue() == .skipped)
        #expect(provider.refreshForUnknownKey() == .skipped)
        #expect(fetcher.fetchCount == 1)
    }

    @Test("the refresher service keeps the schedule when the wall clock is set back, and stops when asked")
    func refresherWithWallClockSteppedBack() throws {
        let started = try Started(serving: [TestSigningKey.generate(keyID: "known")])
        let (fetcher, clock, provider) = (started.fetcher, started.clock, started.provider)
        let services = ServiceGroup()
        services.start(JWKSRefresher(provider: provider, checkInterval: .milliseconds(10)))
        defer { services.stop(until: .now + .seconds(10)) }
        clock.advance(by: 3600)
        clock.stepWallClock(by: -7200)
        let deadline = ContinuousClock.now + .seconds(10)
        while fetcher.fetchCount < 2 && ContinuousClock.now < deadline { usleep(5000) }
        #expect(fetcher.fetchCount == 2)
        // Stopped: stop returns true only once the refresher's run() has returned, so no
        // thread is left to fetch, however much time passes (no sleep needed to see it).
        #expect(services.stop(until: .now + .seconds(10)))
        let readsAtStop = clock.monotonicReadCount
        clock.advance(by: 7200)
        #expect(provider.refreshIfDue() == .refreshed, "a refresh was due: only the stopped refresher did not make it")
        #expect(fetcher.fetchCount == 3)
        #expect(clock.monotonicReadCount == readsAtStop + 1, "only this test's call read the clock after stop")
    }

    @Test(
        "a scheduled refresh finding an unknown kid's fetch handed over and not begun makes it, and does not wait for ever"
    )
    func scheduledRefreshMakesTheFetchHandedOver() throws {
        let fetcher = JWKSFetcherDouble()
        fetcher.serve(try JWKSTestFixtures.document([TestSigningKey.generate(keyID: "known")]))
        let clock = JWKSTestClock(Self.start)
        let provider = JWKSProvider(
            settings: JWKSProvider.Settings(
                url: "https://jwks.invalid/auth/keys", refreshInterval: .seconds(3600),
                failedRefreshRetryInterval: .seconds(60), unknownKeyIDRefreshInterval: .seconds(60),
                unknownKeyIDWaitLimit: .milliseconds(20)),
            fetcher: fetcher, clock: clock.endpointClock)
        #expect(provider.start() == .refreshed)
        // The queue open, as the refresher's start() leaves it, with this test as its service.
        provider.fetchQueue.open()
        defer { provider.fetchQueue.close() }
        // An unknown kid: its fetch is handed to the queue, and its caller stops waiting.
        clock.advance(by: 60)
        #expect(provider.refreshForUnknownKey() == .stillRunning)
        #expect(fetcher.fetchCount == 1)
        // The service's scheduled refresh, before it has run the queue (what happens when the
        // fetch is handed over between the step's runPending() and its refreshIfDue()).
        let outcome = Mutex<JWKSRefreshOutcome?>(nil)
        let returned = DispatchSemaphore(value: 0)
        Thread {
            let result = provider.refreshIfDue()
            outcome.withLock { $0 = result }
            returned.signal()
        }.start()
        #expect(returned.wait(timeout: .now() + 10) == .success, "refreshIfDue waited for a fetch only it could make")
        #expect(outcome.withLock { $0 } == .refreshed)
        #expect(fetcher.fetchCount == 2)
        // Nothing is left in the queue, and the next unknown kid is rate limited from that fetch.
        #expect(provider.refreshForUnknownKey() == .skipped)
    }

    @Test("unknown-kid refresh: at most once per interval, counted from the last fetch of any kind")
    func unknownKeyIDRefresh() throws {
        let known = try TestSigningKey.generate(keyID: "known")
        let stranger = try TestSigningKey.generate(keyID: "stranger")
        let started = try Started(serving: [known])
        let (fetcher, clock, provider) = (started.fetcher, started.clock, started.provider)
        let verifier = JWKSTestFixtures.verifier
        /// The verification's code at `start + offset` (the clock moves there).
        func code(at offset: Int64) throws -> VerificationError.Code? {
            clock.advance(by: Self.start + offset - clock.now)
            let body = try stranger.signedBody(issuedAt: clock.now)
            do {
                _ = try verifier.verify(body: body, keys: provider, now: clock.now)
                return nil
            } catch {
                return error.code
            }
        }

        // Within the interval of the start fetch: no fetch, so not known to be unknown: 503.
        #expect(try code(at: 59) == .keysUnavailable)
        #expect(fetcher.fetchCount == 1)
        // After it: one fetch that still lacks the kid: 401.
        #expect(try code(at: 60) == .kidUnknown)
        #expect(fetcher.fetchCount == 2)
        #expect(try code(at: 119) == .keysUnavailable)
        #expect(fetcher.fetchCount == 2)
        // A failed fetch made for the request: 503, and it counts for the rate limit.
        fetcher.serve(nil)
        #expect(try code(at: 120) == .keysUnavailable)
        #expect(fetcher.fetchCount == 3)
        clock.advance(by: 59)
        #expect(provider.refreshForUnknownKey() == .skipped)
        // A scheduled refresh also counts: right after it, no unknown-kid fetch.
        fetcher.serve(try JWKSTestFixtures.document([known, stranger]))
        clock.advance(by: 1)
        #expect(provider.refreshIfDue() == .refreshed)
        #expect(fetcher.fetchCount == 4)
        clock.advance(by: 59)
        #expect(provider.refreshForUnknownKey() == .skipped)
        #expect(fetcher.fetchCount == 4)
        // The key the scheduled fetch brought now verifies without a fetch.
        #expect(try code(at: 239) == nil)
        #expect(fetcher.fetchCount == 4)
    }
}
