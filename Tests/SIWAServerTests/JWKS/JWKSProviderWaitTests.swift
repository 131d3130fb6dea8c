import Foundation
import Glibc
import SIWAKeys
import SIWASupport
import SIWATestKit
import Synchronization
import Testing

/// A fetch of Apple's JWKS that hangs until the test lets it go (an in-process stand-in:
/// Apple cannot be reached from a test; the real slow host is in `ServeKeySetTests`).
final class HeldJWKSFetcher: JWKSFetching {
    private let document: [UInt8]
    private let entered = DispatchSemaphore(value: 0)
    private let release = DispatchSemaphore(value: 0)
    private let holding = Mutex(false)
    private let threads = Mutex<[pthread_t]>([])

    /// The thread each fetch ran on, in order.
    var fetchThreads: [pthread_t] { threads.withLock { $0 } }

    init(document: [UInt8]) { self.document = document }

    /// From now on each fetch waits for `letGo()` (at most 60 s).
    func hold() { holding.withLock { $0 = true } }

    /// Waits until a held fetch has started.
    func waitUntilHeld() -> Bool { entered.wait(timeout: .now() + 30) == .success }

    func letGo() {
        holding.withLock { $0 = false }
        release.signal()
    }

    func fetch(_ url: String) throws -> [UInt8] {
        threads.withLock { $0.append(pthread_self()) }
        if holding.withLock({ $0 }) {
            entered.signal()
            _ = release.wait(timeout: .now() + 60)
        }
        return document
    }
}

/// An unknown kid waits for a fetch only within a bound, and only one at a time: made-up
/// kids cannot hold the workers while the JWKS host is slow. The fetch runs on the JWKS
/// refresher's thread, as in serve (the refresher runs in a service group here).
@Suite("JWKS provider: waiting for a fetch on an unknown kid")
struct JWKSProviderWaitTests {
    static func started(
        waitLimit: Duration, waiters: Int
    ) throws -> (JWKSProvider, HeldJWKSFetcher, JWKSTestClock, ServiceGroup) {
        let fetcher = HeldJWKSFetcher(
            document: try JWKSTestFixtures.document([TestSigningKey.generate(keyID: "known")]))
        let clock = JWKSTestClock()
        let provider = JWKSProvider(
            settings: JWKSProvider.Settings(
                url: "https://jwks.invalid/auth/keys", unknownKeyIDRefreshInterval: .seconds(60),
                unknownKeyIDWaitLimit: waitLimit, unknownKeyIDWaiters: waiters),
            fetcher: fetcher, clock: clock.endpointClock)
        #expect(provider.start() == .refreshed)
        clock.advance(by: 60)
        fetcher.hold()
        // Its schedule is not due (the test clock moved 60 s of an hour): it fetches only
        // what an unknown kid hands it.
        let group = ServiceGroup()
        group.start(JWKSRefresher(provider: provider, checkInterval: .seconds(3600)))
        return (provider, fetcher, clock, group)
    }

    /// Lets a held fetch go, then stops the refresher.
    static func stop(_ fetcher: HeldJWKSFetcher, _ group: ServiceGroup) {
        fetcher.letGo()
        #expect(group.stop(until: .now + .seconds(30)), "the JWKS refresher did not stop")
    }

    static func timed(_ call: () -> JWKSRefreshOutcome) -> (JWKSRefreshOutcome, Duration) {
        let started = ContinuousClock.now
        let outcome = call()
        return (outcome, ContinuousClock.now - started)
    }

    @Test("the caller that starts a fetch waits at most the limit, then is told it still runs")
    func waitIsBounded() throws {
        let (provider, fetcher, _, group) = try Self.started(waitLimit: .milliseconds(300), waiters: 1)
        defer { Self.stop(fetcher, group) }
        let (outcome, waited) = Self.timed { provider.refreshForUnknownKey() }
        #expect(outcome == .stillRunning)
        #expect(waited >= .milliseconds(300))
        // The fetch is held for 60 s: a wait without a bound shows as far more than 10 s.
        #expect(waited < .seconds(10), "waited \(waited)")
        #expect(fetcher.waitUntilHeld())
    }

    @Test("while one caller waits, the others do not wait at all; the waiter gets the fetch's outcome")
    func onlyOneWaits() throws {
        let (provider, fetcher, _, group) = try Self.started(waitLimit: .seconds(50), waiters: 1)
        defer { Self.stop(fetcher, group) }
        let first = Mutex<JWKSRefreshOutcome?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            first.withLock { $0 = provider.refreshForUnknownKey() }
            done.signal()
        }.start()
        #expect(fetcher.waitUntilHeld())
        // The first caller waits (its limit is 50 s); every other is answered at once.
        for _ in 0..<8 {
            let (outcome, waited) = Self.timed { provider.refreshForUnknownKey() }
            #expect(outcome == .stillRunning)
            #expect(waited < .seconds(10), "waited \(waited)")
        }
        fetcher.letGo()
        #expect(done.wait(timeout: .now() + 30) == .success)
        #expect(first.withLock { $0 } == .refreshed)
        #expect(provider.keys.usableKeyIDs == ["known"])
    }

    @Test("with no waiting place (a lone worker) no caller waits, and the fetch still lands")
    func noWaitingPlace() throws {
        let (provider, fetcher, clock, group) = try Self.started(waitLimit: .seconds(50), waiters: 0)
        defer { Self.stop(fetcher, group) }
        let (outcome, waited) = Self.timed { provider.refreshForUnknownKey() }
        #expect(outcome == .stillRunning)
        #expect(waited < .seconds(10), "waited \(waited)")
        #expect(fetcher.waitUntilHeld())
        fetcher.letGo()
        // The fetch landed on the refresher's thread: the next unknown kid within the interval is
        // not fetched again (skipped), and the scheduled refresh is not due.
        let landed = ContinuousClock.now + .seconds(30)
        while provider.refreshForUnknownKey() == .stillRunning && ContinuousClock.now < landed {
            usleep(20_000)
        }
        #expect(provider.refreshForUnknownKey() == .skipped)
        #expect(provider.metrics(now: clock.now).refreshFailures == 0)
    }
}
