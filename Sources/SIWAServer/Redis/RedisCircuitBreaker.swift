import Foundation
import SIWARedis

/// Keeps a Redis that hangs from holding every worker: after a call that could not reach
/// Redis (a timeout, a refused connection), Redis counts as down and requests go to the
/// spool at once, without a Redis call. One background probe (a `PING` through the same
/// connection code as requests, so with Sentinel it follows a failover) tries again every
/// `retryInterval`; its first `PONG` closes the breaker and `onClose` runs (the spool
/// replayer's nudge).
///
/// `/healthz` never waits on Redis for longer than it is given: while the breaker is open it
/// reports the breaker and the last probe; while closed, one `PING` runs on a thread of its
/// own and /healthz waits for it at most `within` (at most one such PING at a time).
public final class RedisCircuitBreaker: @unchecked Sendable {
    /// What /healthz shows about Redis.
    public struct Health: Sendable, Equatable {
        public var answers: Bool
        /// Set while the breaker is open: how long it has been open, in milliseconds.
        public var openMilliseconds: Int64?
        /// While open: the last probe's error code (nil before the first probe).
        public var lastProbe: String?
        /// While closed: the PING did not answer within the bound /healthz gave.
        public var pingPending = false
    }

    public let retryInterval: Duration
    private let ping: @Sendable () -> RedisError?
    private let condition = NSCondition()
    private var openedAt: ContinuousClock.Instant?
    private var lastProbe: String?
    private var probeRunning = false
    private var stopping = false
    private var healthPingRunning = false
    private var healthPingResult: RedisError??
    private var onClose: (@Sendable () -> Void)?

    /// `ping` returns nil on `PONG`, else the error; it may take the full Redis timeout.
    public init(retryInterval: Duration, ping: @escaping @Sendable () -> RedisError?) {
        self.retryInterval = retryInterval
        self.ping = ping
    }

    /// Runs after the probe found Redis back (on the probe's thread).
    public func setOnClose(_ action: @escaping @Sendable () -> Void) {
        condition.withLock { onClose = action }
    }

    /// True while Redis counts as down: callers spool without calling Redis.
    public var isOpen: Bool { condition.withLock { openedAt != nil } }

    /// A Redis call failed. Connection trouble (a timeout, a refused or broken connection, no
    /// primary from the sentinels) opens the breaker; a reply Redis gave does not.
    public func recordFailure(_ error: RedisError) {
        guard error.isConnectionError else { return }
        let opened = condition.withLock { () -> Bool in
            guard openedAt == nil, !stopping else { return false }
            openedAt = .now
            lastProbe = nil
            return true
        }
        guard opened else { return }
        EventLog.event(
            "redis_circuit_opened", level: "warning",
            [
                ("error", .string(error.code.rawValue)),
                ("retry_ms", .integer(Self.milliseconds(retryInterval))),
            ])
        startProbe()
    }

    /// Stops the probe (tests, shutdown); the breaker stays as it is.
    public func stop() {
        condition.withLock {
            stopping = true
            condition.broadcast()
        }
    }

    /// Redis's state for /healthz, within `within` whatever Redis does.
    public func health(within: Duration) -> Health {
        condition.lock()
        defer { condition.unlock() }
        if let openedAt {
            return openHealth(since: openedAt)
        }
        if !healthPingRunning {
            healthPingRunning = true
            healthPingResult = nil
            let thread = Thread { [self] in
                let error = ping()
                if let error { recordFailure(error) }
                condition.withLock {
                    healthPingRunning = false
                    healthPingResult = .some(error)
                    condition.broadcast()
                }
            }
            thread.name = "redis-health-ping"
            thread.start()
        }
        let deadline = Date(timeIntervalSinceNow: Double(Self.milliseconds(within)) / 1000)
        while healthPingRunning {
            if !condition.wait(until: deadline) { break }
        }
        if healthPingRunning { return Health(answers: false, pingPending: true) }
        let result = healthPingResult ?? nil
        healthPingResult = nil
        if let openedAt { return openHealth(since: openedAt) }
        return Health(answers: result == nil)
    }

    // MARK: - Private

    /// Called with the lock held.
    private func openHealth(since: ContinuousClock.Instant) -> Health {
        Health(answers: false, openMilliseconds: Self.milliseconds(ContinuousClock.now - since), lastProbe: lastProbe)
    }

    private func startProbe() {
        let start = condition.withLock { () -> Bool in
            guard !probeRunning else { return false }
            probeRunning = true
            return true
        }
        guard start else { return }
        let thread = Thread { [self] in
            while true {
                let stop = condition.withLock { () -> Bool in
                    let deadline = Date(timeIntervalSinceNow: Double(Self.milliseconds(retryInterval)) / 1000)
                    while !stopping { if !condition.wait(until: deadline) { break } }
                    return stopping
                }
                if stop { break }
                let error = ping()
                let closed = condition.withLock { () -> (Duration, (@Sendable () -> Void)?)? in
                    if let error {
                        lastProbe = error.code.rawValue
                        return nil
                    }
                    let openFor = openedAt.map { ContinuousClock.now - $0 } ?? .zero
                    openedAt = nil
                    lastProbe = nil
                    return (openFor, onClose)
                }
                if let (openFor, onClose) = closed {
                    EventLog.event("redis_circuit_closed", [("open_ms", .integer(Self.milliseconds(openFor)))])
                    onClose?()
                    break
                }
            }
            condition.withLock {
                probeRunning = false
                // Opened again while this thread was finishing: a new probe takes over.
            }
            if isOpen && !condition.withLock({ stopping }) { startProbe() }
        }
        thread.name = "redis-probe"
        thread.start()
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        let parts = duration.components
        return parts.seconds * 1000 + parts.attoseconds / 1_000_000_000_000_000
    }
}
