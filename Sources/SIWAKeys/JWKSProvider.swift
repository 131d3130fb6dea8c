import Foundation
import SIWAHTTPS
import SIWASupport
import SIWATelemetry
import SIWAVerification
import Synchronization

/// Apple's current signing keys for many worker threads, kept fresh.
///
/// At start the cache file is loaded, then the JWKS is fetched. After that a
/// scheduled refresh runs when due (`refreshIfDue`), and a token whose `kid` is
/// unknown may trigger one rate-limited refresh (`refreshForUnknownKey`). All
/// fetches go through one single flight: a caller that arrives while a fetch is
/// running waits for that fetch and gets its outcome, so a burst of unknown kids
/// costs one request. A failed fetch or an unusable document never replaces the
/// last good keys. Whether an unknown kid is a forgery (401) or a question we cannot
/// answer yet (503) is the verifier's rule: it asks for one unknown-kid refresh
/// (`refreshForUnknownKey`, the same refresh) and looks at what it brought.
public final class JWKSProvider: Sendable {
    public let settings: Settings
    private let fetcher: any JWKSFetching
    /// Where an unknown kid's fetch is handed to the refresher's thread (see `JWKSFetchQueue`).
    public let fetchQueue: JWKSFetchQueue
    private let cacheFile: JWKSCacheFile?
    let clock: EndpointClock

    private struct State {
        var keySet = JSONWebKeySet()
        /// The kids of the last document taken whose entry cannot verify (see `take`).
        var unusableKeyIDs: [String] = []
        /// Counts the key sets taken, so the cache file is never overwritten by an older one.
        var generation = 0
        /// Callers with an unknown kid waiting for a fetch now (at most `unknownKeyIDWaiters`).
        var unknownKeyIDWaiting = 0
        /// Wall time (Unix seconds) of the current keys: shown as their age.
        var fetchedAt: Int64?
        /// When the last fetch started, on the monotonic clock: every interval counts from it.
        var lastAttemptAt: ContinuousClock.Instant?
        /// Whether the last fetch brought a usable JWKS: it chooses the next scheduled interval.
        var lastSucceeded = false
        /// The fetch running now, which any other caller joins.
        var flight: Flight?
        var refreshFailures = 0
        /// Cache file reads or writes that failed: a reload names its own failure by it.
        var cacheFailures = 0
        var lastFailure: JWKSFailure?
    }

    private let state = Mutex(State())
    /// The generation of the key set last written to the cache file; held while writing.
    private let cacheWriting = Mutex(0)

    /// - Parameter fetchQueue: where an unknown kid's fetch is handed over, the same queue
    ///   the refresher is given (serve's assembly builds it); a provider of its own by default.
    /// - Parameter clock: intervals count on its monotonic reading, the keys' age on its
    ///   wall reading; tests pass their own.
    public init(
        settings: Settings, fetcher: any JWKSFetching = HTTPSFetcher(), fetchQueue: JWKSFetchQueue = JWKSFetchQueue(),
        clock: EndpointClock = .system
    ) {
        self.settings = settings
        self.fetcher = fetcher
        self.fetchQueue = fetchQueue
        self.cacheFile = settings.cacheFilePath.map { JWKSCacheFile(path: $0) }
        self.clock = clock
    }

    /// The injected wall clock's reading (Unix seconds), for the keys' age in the metrics.
    public func now() -> Int64 { clock.wallSeconds() }

    /// The current key set (empty until one has been loaded).
    public var keys: JSONWebKeySet { state.withLock { $0.keySet } }

    /// How many keys in the current set can verify.
    public var usableKeyCount: Int { state.withLock { $0.keySet.usableKeyIDs.count } }

    /// Loads the cache file, if any, then fetches. Returns the fetch's outcome; with
    /// no network but a good cache file the keys are usable all the same.
    @discardableResult
    public func start() -> JWKSRefreshOutcome {
        if let cacheFile { loadCache(cacheFile) }
        return refresh { _, _ in true }
    }

    /// Reads the cache file again (what SIGHUP does): when it holds a usable JWKS, its
    /// keys replace the held ones. Nothing is fetched. Returns the usable key count after
    /// the reload, and why the file was not taken, if it was not.
    public func reloadCacheFile() -> (keys: Int, failure: JWKSFailure?) {
        guard let cacheFile else {
            return (usableKeyCount, JWKSFailure(.noCacheFile, "no cache file is configured"))
        }
        let failuresBefore = state.withLock { $0.cacheFailures }
        let present = (try? cacheFile.load()) != nil
        loadCache(cacheFile)
        return state.withLock { state in
            let failure =
                state.cacheFailures > failuresBefore
                ? state.lastFailure : present ? nil : JWKSFailure(.cacheFileMissing, "the cache file does not exist")
            return (state.keySet.usableKeyIDs.count, failure)
        }
    }

    /// Fetches when the scheduled interval has passed since the last fetch (or the
    /// shorter retry interval, when that fetch failed).
    @discardableResult
    func refreshIfDue() -> JWKSRefreshOutcome {
        let settings = settings
        return refresh { state, now in
            guard let lastAttemptAt = state.lastAttemptAt else { return true }
            let interval = state.lastSucceeded ? settings.refreshInterval : settings.failedRefreshRetryInterval
            return now - lastAttemptAt >= interval
        }
    }

    /// Fetches now when no usable key is held (a cold start without a cache file while the
    /// network is not up yet): the refresher calls it with a short backoff until keys load.
    @discardableResult
    func refreshIfEmpty() -> JWKSRefreshOutcome {
        refresh { state, _ in state.keySet.usableKeyIDs.isEmpty }
    }

    /// Fetches because a token named a kid we do not hold, at most once per
    /// `unknownKeyIDRefreshInterval` counted from the last fetch of any kind. The fetch is
    /// handed to `fetchQueue` and runs on the thread of the service that runs it (the JWKS
    /// refresher), never on a thread of its own; while no service runs the queue (a bare
    /// provider) the caller fetches. The caller waits for it at most `unknownKeyIDWaitLimit`, and
    /// only `unknownKeyIDWaiters` callers wait at once (`stillRunning` otherwise): a worker
    /// is never held for a whole fetch timeout by a made-up kid.
    @discardableResult
    public func refreshForUnknownKey() -> JWKSRefreshOutcome {
        let interval = settings.unknownKeyIDRefreshInterval
        return refresh(waitLimit: settings.unknownKeyIDWaitLimit) { state, now in
            guard let lastAttemptAt = state.lastAttemptAt else { return true }
            return now - lastAttemptAt >= interval
        }
    }

    /// A snapshot of the counters; `now` is the wall time (Unix seconds) the age counts to.
    public func metrics(now: Int64) -> Metrics {
        state.withLock { state in
            Metrics(
                ageSeconds: state.fetchedAt.map { max(0, now - $0) }, refreshFailures: state.refreshFailures,
                usableKeyCount: state.keySet.usableKeyIDs.count, unusableKeyCount: state.unusableKeyIDs.count,
                lastFailure: state.lastFailure)
        }
    }

    /// One fetch that callers arriving while it runs wait for and share the outcome of.
    private final class Flight: Sendable {
        private let outcome = Mutex<JWKSRefreshOutcome?>(nil)
        private let landed = Latch()

        func land(_ result: JWKSRefreshOutcome) {
            outcome.withLock { $0 = result }
            landed.open()
        }

        /// The outcome, or `stillRunning` when the fetch has not landed by `deadline` (nil:
        /// no deadline; the running fetch is bounded by the fetcher's timeout).
        func wait(until deadline: ContinuousClock.Instant?) -> JWKSRefreshOutcome {
            guard landed.wait(until: deadline) else { return .stillRunning }
            return outcome.withLock { $0 } ?? .failed
        }
    }

    /// The single flight: join a running fetch, or decide under the lock whether to
    /// start one (`isDue` is given the state and the monotonic now), then fetch without
    /// holding the lock. With a `waitLimit` (an unknown kid) the fetch runs on the thread of
    /// the service that takes such fetches (the caller's, without one), and the caller waits
    /// for it within the limit, when a waiting place is free.
    private func refresh(
        waitLimit: Duration? = nil, isDue: (State, ContinuousClock.Instant) -> Bool
    ) -> JWKSRefreshOutcome {
        let now = clock.monotonic()
        let waiters = settings.unknownKeyIDWaiters
        enum Decision {
            case join(Flight)
            case skip
            /// A fetch runs and every waiting place is taken.
            case busy
            case fetch(Flight)
            /// An unknown kid's fetch, handed to the fetch queue's service.
            case handedOver(Flight, waiting: Bool)
            /// An unknown kid's fetch the queue did not take (its service stopped since the
            /// queue was judged open): not made, as a fetch the service dropped.
            case dropped(Flight, waiting: Bool)
        }
        let decision = state.withLock { state -> Decision in
            let mayWait = waitLimit == nil || state.unknownKeyIDWaiting < waiters
            if waitLimit != nil && mayWait { state.unknownKeyIDWaiting += 1 }
            if let flight = state.flight { return mayWait ? .join(flight) : .busy }
            guard isDue(state, now) else {
                if waitLimit != nil && mayWait { state.unknownKeyIDWaiting -= 1 }
                return .skip
            }
            let flight = Flight()
            state.flight = flight
            state.lastAttemptAt = now
            guard waitLimit != nil, fetchQueue.isOpen else {
                // No service runs the queue (a bare provider, as tests and tools use): the caller fetches.
                if waitLimit != nil && mayWait { state.unknownKeyIDWaiting -= 1 }
                return .fetch(flight)
            }
            // Handed over under the lock that makes it the flight: whoever joins it finds it
            // already in the queue (a scheduled refresh then makes it, below), never a flight
            // published and not yet handed over, which no thread would make.
            let fetch = JWKSFetchQueue.Fetch(run: { _ = self.fly(flight) }, drop: { self.drop(flight) })
            guard fetchQueue.hand(fetch) else {
                state.flight = nil
                return .dropped(flight, waiting: mayWait)
            }
            return .handedOver(flight, waiting: mayWait)
        }
        let flight: Flight
        switch decision {
        case .skip: return .skipped
        case .busy: return .stillRunning
        case .fetch(let started): return fly(started)
        case .join(let running): flight = running
        case .handedOver(let started, let waiting):
            guard waiting else { return .stillRunning }
            flight = started
        case .dropped(let started, let waiting):
            started.land(.skipped)
            guard waiting else { return .stillRunning }
            flight = started
        }
        guard let waitLimit else {
            // A scheduled refresh joining an unknown kid's fetch. While the queue is open,
            // only its service (the refresher) refreshes without a limit, and it is also the
            // thread that makes a fetch handed over: waiting for one not yet begun would wait
            // for ever (no fetch again, ever, and every unknown kid 503). So it makes the fetch
            // handed over, if one waits (a joined flight is always in the queue already, see
            // above), then waits for the flight, which has landed or runs.
            if fetchQueue.isOpen { fetchQueue.runPending() }
            return flight.wait(until: nil)
        }
        defer { state.withLock { $0.unknownKeyIDWaiting -= 1 } }
        return flight.wait(until: ContinuousClock.now + waitLimit)
    }

    /// A fetch handed over and never begun (the service stopped): it is no longer the
    /// flight others join, and its waiters are told `skipped`.
    private func drop(_ flight: Flight) {
        state.withLock { state in
            if state.flight === flight { state.flight = nil }
        }
        flight.land(.skipped)
    }

    /// Runs the fetch of `flight`, lands it for every caller waiting, then writes the cache
    /// file (its fsyncs wait for the disk, which no caller needs to wait for).
    @discardableResult
    private func fly(_ flight: Flight) -> JWKSRefreshOutcome {
        let wallNow = clock.wallSeconds()
        let result = fetchKeySet()
        var taken: (document: JSONWebKeySet, kept: [String], cacheBytes: [UInt8], generation: Int)?
        let outcome = state.withLock { state -> JWKSRefreshOutcome in
            state.flight = nil
            switch result {
            case .success(let fetched, let bytes):
                let kept = take(fetched, in: &state)
                state.fetchedAt = wallNow
                state.lastSucceeded = true
                // When older keys were kept, the file keeps them too: a restart must not
                // bring the broken entries back in their place.
                let cacheBytes = kept.isEmpty ? bytes : state.keySet.usableKeysDocument()
                taken = (fetched, kept, cacheBytes, state.generation)
                return .refreshed
            case .failure(let failure):
                state.lastSucceeded = false
                state.refreshFailures += 1
                state.lastFailure = failure
                return .failed
            }
        }
        flight.land(outcome)
        if let taken {
            Self.logUnusableKeys(of: taken.document, kept: taken.kept, source: "fetch")
            if let cacheFile { store(taken.cacheBytes, generation: taken.generation, in: cacheFile) }
        }
        return outcome
    }

    /// Makes `document` the held key set, except that an unusable entry never displaces a
    /// usable key held under the same kid; returns the kids so kept.
    private func take(_ document: JSONWebKeySet, in state: inout State) -> [String] {
        let (merged, kept) = document.keepingUsableKeys(of: state.keySet)
        state.keySet = merged
        state.unusableKeyIDs = document.unusableKeyIDs
        state.generation += 1
        return kept
    }

    /// One warning line per document taken with unusable entries: which kids, and under
    /// which of them an older key was kept. (Kids are public; no key material is written.)
    private static func logUnusableKeys(of document: JSONWebKeySet, kept: [String], source: String) {
        let unusable = document.unusableEntries
        guard !unusable.isEmpty else { return }
        EventLog.event(
            "jwks_keys_unusable", level: "warning",
            [
                ("source", .string(source)),
                (
                    "unusable",
                    .array(
                        unusable.map { entry in
                            .object(["kid": .string(entry.keyID), "error": .string(entry.reason.description)])
                        })
                ),
                ("kept", .array(kept.map { .string($0) })),
            ])
    }

    private func store(_ bytes: [UInt8], generation: Int, in cacheFile: JWKSCacheFile) {
        cacheWriting.withLock { lastStored in
            guard generation > lastStored else { return }
            do {
                try cacheFile.store(bytes)
                lastStored = generation
            } catch {
                // The keys are good; only the restart without network loses them.
                state.withLock { state in
                    state.cacheFailures += 1
                    state.lastFailure = JWKSFailure(.cacheWriteFailed, "JWKS cache write failed", cause: error)
                }
            }
        }
    }

    private enum FetchResult {
        case success(JSONWebKeySet, [UInt8])
        case failure(JWKSFailure)
    }

    private func fetchKeySet() -> FetchResult {
        let bytes: [UInt8]
        do { bytes = try fetcher.fetch(settings.url) } catch {
            return .failure(JWKSFailure(.fetchFailed, "JWKS fetch failed", cause: error))
        }
        do { return .success(try usableKeySet(bytes), bytes) } catch {
            return .failure(
                error.cause.map { JWKSFailure(.documentUnusable, "the JWKS document is unusable", cause: $0) }
                    ?? JWKSFailure(.documentUnusable, error.message))
        }
    }

    private func loadCache(_ cacheFile: JWKSCacheFile) {
        do {
            guard let (bytes, writtenAt) = try cacheFile.load() else { return }
            let cached = try usableKeySet(bytes)
            let kept = state.withLock { state in
                defer { state.fetchedAt = writtenAt }
                return take(cached, in: &state)
            }
            Self.logUnusableKeys(of: cached, kept: kept, source: "cache")
        } catch {
            state.withLock { state in
                state.cacheFailures += 1
                state.lastFailure = JWKSFailure(.cacheLoadFailed, "JWKS cache load failed", cause: error)
            }
        }
    }

    /// A document is usable only when at least one key can verify once the held keys its
    /// unusable entries cannot displace are counted.
    private func usableKeySet(_ bytes: [UInt8]) throws(UnusableDocument) -> JSONWebKeySet {
        let keySet: JSONWebKeySet
        do { keySet = try JSONWebKeySet(jsonBytes: bytes) } catch {
            throw UnusableDocument(message: error.description, cause: error)
        }
        let held = keys
        guard !keySet.keepingUsableKeys(of: held).keySet.usableKeyIDs.isEmpty else {
            throw UnusableDocument(message: "the JWKS has no usable key", cause: nil)
        }
        return keySet
    }

    /// Why a document gives no usable key: the parse error underneath, if that was it.
    private struct UnusableDocument: Error, CustomStringConvertible {
        let message: String
        let cause: JWKSError?
        var description: String { cause.map { "\($0)" } ?? message }
    }
}
