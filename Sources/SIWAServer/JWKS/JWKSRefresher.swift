import Foundation
import SIWASupport

/// A background thread that calls `refreshIfDue` on a short tick, so the schedule
/// (hourly, or the retry interval after a failure) is kept without a request.
public final class JWKSRefresher: @unchecked Sendable {
    public let provider: JWKSProvider
    /// How often the thread asks whether a refresh is due.
    public let checkIntervalSeconds: Double

    // Guarded by `condition`.
    private let condition = NSCondition()
    private var stopRequested = false
    private var running = false

    public init(provider: JWKSProvider, checkIntervalSeconds: Double = 15) {
        self.provider = provider
        self.checkIntervalSeconds = checkIntervalSeconds
    }

    /// Starts the thread; a second call while running does nothing.
    public func start() {
        let shouldStart = condition.withLock {
            guard !running else { return false }
            running = true
            stopRequested = false
            return true
        }
        guard shouldStart else { return }
        let thread = Thread { [self] in run() }
        thread.name = "jwks-refresher"
        thread.start()
    }

    /// Asks the thread to stop and waits for it, at most `timeoutSeconds` (a fetch in
    /// progress ends within the fetcher's own timeout). Returns whether it stopped.
    @discardableResult
    public func stop(timeoutSeconds: Double = 10) -> Bool {
        stop(until: ContinuousClock.now + .milliseconds(Int64(timeoutSeconds * 1000)))
    }

    /// Asks the thread to stop without waiting for it.
    public func requestStop() {
        condition.withLock {
            stopRequested = true
            condition.broadcast()
        }
    }

    /// Stops the thread, waiting for it until `deadline` (the shared shutdown deadline).
    @discardableResult
    public func stop(until deadline: ContinuousClock.Instant) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        stopRequested = true
        condition.broadcast()
        while running {
            guard condition.wait(untilMonotonic: deadline) else { return !running }
        }
        return true
    }

    /// While no usable key is held, a fetch is retried after 1 s, then 2, 4, ... up to the
    /// unknown-kid interval (a boot where the network comes up late must not leave every
    /// notification at 503 for a whole retry interval); with keys, the schedule is checked
    /// every `checkIntervalSeconds`.
    private func run() {
        let longestBackoff = max(1, Double(provider.settings.unknownKeyIDRefreshIntervalSeconds))
        var backoff = 1.0
        while true {
            let stopping = condition.withLock { stopRequested }
            if stopping { break }
            if provider.keys.usableKeyIDs.isEmpty {
                provider.refreshIfEmpty(now: provider.now())
            } else {
                provider.refreshIfDue(now: provider.now())
            }
            let wait: Double
            if provider.keys.usableKeyIDs.isEmpty {
                wait = backoff
                backoff = min(backoff * 2, longestBackoff)
            } else {
                wait = checkIntervalSeconds
                backoff = 1
            }
            condition.lock()
            if !stopRequested {
                _ = condition.wait(until: Date(timeIntervalSinceNow: wait))
            }
            condition.unlock()
        }
        condition.withLock {
            running = false
            condition.broadcast()
        }
    }
}
