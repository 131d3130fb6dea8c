import Foundation
import SIWAHTTPS
import SIWAVerification

/// Apple's current signing keys for many worker threads, kept fresh.
///
/// At start the cache file is loaded, then the JWKS is fetched. After that a
/// scheduled refresh runs when due (`refreshIfDue`), and a token whose `kid` is
/// unknown may trigger one rate-limited refresh (`refreshForUnknownKeyID`). All
/// fetches go through one single flight: a caller that arrives while a fetch is
/// running waits for that fetch and gets its outcome, so a burst of unknown kids
/// costs one request. A failed fetch or an unusable document never replaces the
/// last good keys; `lastRefreshSucceeded` tells the responder whether an unknown
/// kid is a forgery (401) or a question we cannot answer yet (503).
public final class JWKSProvider: @unchecked Sendable {
    public let settings: Settings
    private let fetcher: any JWKSFetching
    private let cacheFile: JWKSCacheFile?
    private let clock: @Sendable () -> Int64

    // Everything below is guarded by `condition`.
    private let condition = NSCondition()
    private var keySet = JSONWebKeySet()
    private var fetchedAt: Int64?
    private var lastAttemptAt: Int64?
    private var lastSucceeded = false
    private var fetchInFlight = false
    private var completedFetches = 0
    private var lastFetchOutcome = JWKSRefreshOutcome.skipped
    private var refreshFailures = 0
    private var refreshSuccesses = 0
    private var cacheFailures = 0
    private var lastFailure: String?

    /// - Parameter clock: the current Unix time in seconds; tests pass their own.
    public init(
        settings: Settings, fetcher: any JWKSFetching = HTTPSFetcher(),
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.settings = settings
        self.fetcher = fetcher
        self.cacheFile = settings.cacheFilePath.map { JWKSCacheFile(path: $0) }
        self.clock = clock
    }

    /// The injected clock's reading, for callers that have no time of their own.
    public func now() -> Int64 { clock() }

    /// The current key set (empty until one has been loaded).
    public var keys: JSONWebKeySet { condition.withLock { keySet } }

    /// Whether the most recent fetch brought a usable JWKS.
    public var lastRefreshSucceeded: Bool { condition.withLock { lastSucceeded } }

    /// Loads the cache file, if any, then fetches. Returns the fetch's outcome; with
    /// no network but a good cache file the keys are usable all the same.
    @discardableResult
    public func start() -> JWKSRefreshOutcome {
        if let cacheFile { loadCache(cacheFile) }
        return refresh(now: clock()) { _ in true }
    }

    /// Reads the cache file again (what SIGHUP does): when it holds a usable JWKS, its
    /// keys replace the held ones. Nothing is fetched. Returns the usable key count after
    /// the reload, and why the file was not taken, if it was not.
    public func reloadCacheFile() -> (keys: Int, failure: String?) {
        guard let cacheFile else { return (keys.usableKeyIDs.count, "no cache file is configured") }
        let failuresBefore = condition.withLock { cacheFailures }
        let present = (try? cacheFile.load()) != nil
        loadCache(cacheFile)
        return condition.withLock {
            let failure =
                cacheFailures > failuresBefore ? lastFailure : present ? nil : "the cache file does not exist"
            return (keySet.usableKeyIDs.count, failure)
        }
    }

    /// Fetches when the scheduled interval has passed since the last fetch (or the
    /// shorter retry interval, when that fetch failed).
    @discardableResult
    public func refreshIfDue(now: Int64) -> JWKSRefreshOutcome {
        refresh(now: now) { provider in
            guard let lastAttemptAt = provider.lastAttemptAt else { return true }
            let interval =
                provider.lastSucceeded
                ? provider.settings.refreshIntervalSeconds : provider.settings.failedRefreshRetrySeconds
            return now - lastAttemptAt >= interval
        }
    }

    /// Fetches now when no usable key is held (a cold start without a cache file while the
    /// network is not up yet): the refresher calls it with a short backoff until keys load.
    @discardableResult
    public func refreshIfEmpty(now: Int64) -> JWKSRefreshOutcome {
        refresh(now: now) { provider in provider.keySet.usableKeyIDs.isEmpty }
    }

    /// Fetches because a token named a kid we do not hold, at most once per
    /// `unknownKeyIDRefreshIntervalSeconds` counted from the last fetch of any kind.
    @discardableResult
    public func refreshForUnknownKeyID(now: Int64) -> JWKSRefreshOutcome {
        refresh(now: now) { provider in
            guard let lastAttemptAt = provider.lastAttemptAt else { return true }
            return now - lastAttemptAt >= provider.settings.unknownKeyIDRefreshIntervalSeconds
        }
    }

    /// A snapshot of the counters at `now`.
    public func metrics(now: Int64) -> Metrics {
        condition.withLock {
            Metrics(
                ageSeconds: fetchedAt.map { max(0, now - $0) }, refreshFailures: refreshFailures,
                refreshSuccesses: refreshSuccesses, cacheFailures: cacheFailures, lastRefreshSucceeded: lastSucceeded,
                usableKeyCount: keySet.usableKeyIDs.count, lastFailure: lastFailure)
        }
    }

    /// The single flight: join a running fetch, or decide under the lock whether to
    /// start one, then fetch without holding the lock.
    private func refresh(now: Int64, isDue: (JWKSProvider) -> Bool) -> JWKSRefreshOutcome {
        condition.lock()
        if fetchInFlight {
            // The running fetch is bounded by the fetcher's timeout.
            let generation = completedFetches
            while completedFetches == generation { condition.wait() }
            let outcome = lastFetchOutcome
            condition.unlock()
            return outcome
        }
        guard isDue(self) else {
            condition.unlock()
            return .skipped
        }
        fetchInFlight = true
        lastAttemptAt = now
        condition.unlock()

        let result = fetchKeySet()

        condition.lock()
        switch result {
        case .success(let fetched):
            keySet = fetched
            fetchedAt = now
            lastSucceeded = true
            refreshSuccesses += 1
            lastFetchOutcome = .refreshed
        case .failure(let message):
            lastSucceeded = false
            refreshFailures += 1
            lastFailure = message
            lastFetchOutcome = .failed
        }
        fetchInFlight = false
        completedFetches += 1
        let outcome = lastFetchOutcome
        condition.broadcast()
        condition.unlock()
        return outcome
    }

    private enum FetchResult {
        case success(JSONWebKeySet)
        case failure(String)
    }

    private func fetchKeySet() -> FetchResult {
        let bytes: [UInt8]
        do { bytes = try fetcher.fetch(settings.url) } catch { return .failure("JWKS fetch failed: \(error)") }
        let fetched: JSONWebKeySet
        do { fetched = try Self.usableKeySet(bytes) } catch { return .failure(error.description) }
        if let cacheFile {
            do { try cacheFile.store(bytes) } catch {
                // The keys are good; only the restart without network loses them.
                condition.withLock {
                    cacheFailures += 1
                    lastFailure = "JWKS cache write failed: \(error)"
                }
            }
        }
        return .success(fetched)
    }

    private func loadCache(_ cacheFile: JWKSCacheFile) {
        do {
            guard let (bytes, writtenAt) = try cacheFile.load() else { return }
            let cached = try Self.usableKeySet(bytes)
            condition.withLock {
                keySet = cached
                fetchedAt = writtenAt
            }
        } catch {
            condition.withLock {
                cacheFailures += 1
                lastFailure = "JWKS cache load failed: \(error)"
            }
        }
    }

    /// A document is usable only when at least one key in it can verify.
    private static func usableKeySet(_ bytes: [UInt8]) throws(UnusableDocument) -> JSONWebKeySet {
        let keySet: JSONWebKeySet
        do { keySet = try JSONWebKeySet(jsonBytes: bytes) } catch { throw UnusableDocument(description: "\(error)") }
        guard !keySet.usableKeyIDs.isEmpty else { throw UnusableDocument(description: "the JWKS has no usable key") }
        return keySet
    }

    private struct UnusableDocument: Error, CustomStringConvertible {
        let description: String
    }
}
