import Foundation
import SIWARedis
import SIWASupport
import Synchronization

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
public final class RedisCircuitBreaker: Sendable {
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
    /// Its monotonic reading times how long the breaker is open. The waits (the probe's
    /// interval, /healthz's bound) are the machine's own: a thread sleeps on the real clock.
    private let clock: EndpointClock

    private struct State {
        var openedAt: ContinuousClock.Instant?
        var lastProbe: String?
        var probeRunning = false
        /// The /healthz PING running now, which every /healthz call meanwhile waits on.
        var healthPing: HealthPing?
        var onClose: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())
    /// Opens at `stop()`: ends the probe's wait.
    private let stopped = Latch()

    /// One /healthz PING: its result once it has answered.
    private final class HealthPing: Sendable {
        let answered = Latch()
        let error = Mutex<RedisError?>(nil)
    }

    /// `ping` returns nil on `PONG`, else the error; it may take the full Redis timeout.
    public init(
        retryInterval: Duration, clock: EndpointClock = .system, ping: @escaping @Sendable () -> RedisError?
    ) {
        self.retryInterval = retryInterval
        self.clock = clock
        self.ping = ping
    }

    /// Runs after the probe found Redis back (on the probe's thread).
    public func setOnClose(_ action: @escaping @Sendable () -> Void) {
        state.withLock { $0.onClose = action }
    }

    /// True while Redis counts as down: callers spool without calling Redis.
    public var isOpen: Bool { state.withLock { $0.openedAt != nil } }

    /// A Redis call failed. Connection trouble (a timeout, a refused or broken connection, no
    /// primary from the sentinels) opens the breaker; a reply Redis gave does not.
    public func recordFailure(_ error: RedisError) {
        guard error.isConnectionError else { return }
        let stopping = stopped.hasOpened
        let now = clock.monotonic()
        let opened = state.withLock { state -> Bool in
            guard state.openedAt == nil, !stopping else { return false }
            state.openedAt = now
            state.lastProbe = nil
            return true
        }
        guard opened else { return }
        EventLog.event(
            "redis_circuit_opened", level: "warning",
            [
                ("error", .string(error.code.rawValue)),
                ("retry_ms", .integer(retryInterval.wholeMilliseconds)),
            ])
        startProbe()
    }

    /// Stops the probe (tests, shutdown); the breaker stays as it is.
    public func stop() { stopped.open() }

    /// Redis's state for /healthz, within `within` whatever Redis does (on the monotonic clock).
    public func health(within: Duration) -> Health {
        let deadline = ContinuousClock.now + within
        enum Next {
            case open(Health)
            case wait(HealthPing, start: Bool)
        }
        let next = state.withLock { state -> Next in
            if let openedAt = state.openedAt { return .open(openHealth(state, since: openedAt)) }
            if let running = state.healthPing { return .wait(running, start: false) }
            let started = HealthPing()
            state.healthPing = started
            return .wait(started, start: true)
        }
        let healthPing: HealthPing
        switch next {
        case .open(let health): return health
        case .wait(let running, let start):
            healthPing = running
            if start { startHealthPing(healthPing) }
        }
        guard healthPing.answered.wait(until: deadline) else { return Health(answers: false, pingPending: true) }
        let error = healthPing.error.withLock { $0 }
        return state.withLock { state in
            if let openedAt = state.openedAt { return openHealth(state, since: openedAt) }
            return Health(answers: error == nil)
        }
    }

    // MARK: - Private

    private func startHealthPing(_ healthPing: HealthPing) {
        let thread = Thread { [self] in
            let error = ping()
            if let error { recordFailure(error) }
            healthPing.error.withLock { $0 = error }
            state.withLock { $0.healthPing = nil }
            healthPing.answered.open()
        }
        thread.name = "redis-health-ping"
        thread.start()
    }

    private func openHealth(_ state: State, since: ContinuousClock.Instant) -> Health {
        Health(
            answers: false, openMilliseconds: (clock.monotonic() - since).wholeMilliseconds,
            lastProbe: state.lastProbe)
    }

    private func startProbe() {
        let start = state.withLock { state -> Bool in
            guard !state.probeRunning else { return false }
            state.probeRunning = true
            return true
        }
        guard start else { return }
        let thread = Thread { [self] in
            // The retry interval on the monotonic clock; `stop()` ends the wait.
            while !stopped.wait(until: ContinuousClock.now + retryInterval) {
                let error = ping()
                let now = clock.monotonic()
                let closed = state.withLock { state -> (Duration, (@Sendable () -> Void)?)? in
                    if let error {
                        state.lastProbe = error.code.rawValue
                        return nil
                    }
                    let openFor = state.openedAt.map { now - $0 } ?? .zero
                    state.openedAt = nil
                    state.lastProbe = nil
                    return (openFor, state.onClose)
                }
                if let (openFor, onClose) = closed {
                    EventLog.event("redis_circuit_closed", [("open_ms", .integer(openFor.wholeMilliseconds))])
                    onClose?()
                    break
                }
            }
            state.withLock { $0.probeRunning = false }
            // Opened again while this thread was finishing: a new probe takes over.
            if isOpen && !stopped.hasOpened { startProbe() }
        }
        thread.name = "redis-probe"
        thread.start()
    }
}
