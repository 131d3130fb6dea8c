import Foundation
import SIWARedis
import SIWASupport
import SIWATelemetry
import Synchronization

/// Keeps a Redis that hangs from holding every worker: after a call that could not reach
/// Redis (a timeout, a refused connection), Redis counts as down and requests go to the
/// spool at once, without a Redis call. The breaker is a service of serve's group: its one
/// long-lived thread (`run()`) does every `PING` it makes (through the same connection code
/// as requests, so with Sentinel it follows a failover). While open, it probes every
/// `retryInterval`; its first `PONG` closes the breaker and `onClose` runs (the spool
/// replayer's nudge).
///
/// `/healthz` never waits on Redis for longer than it is given: while the breaker is open it
/// reports the breaker and the last probe; while closed, it asks the service thread for one
/// `PING` and waits for it at most `within` (every /healthz call meanwhile waits on the same
/// one). Without a running service, a /healthz PING is never answered: Redis counts as down.
public final class RedisCircuitBreaker: Service {
    /// What /healthz shows about Redis.
    public struct Health: Sendable, Equatable {
        public var answers: Bool
        /// Set while the breaker is open: how long it has been open, in milliseconds.
        public var openMilliseconds: Int64?
        /// While open: the last probe's error code (nil before the first probe).
        public var lastProbe: String?
        /// While closed: the PING did not answer within the bound /healthz gave.
        public var pingPending = false
        /// While open because the server's certificate is refused (the last failure said so).
        public var tlsRefusal: ServerCertificateRefusal?
    }

    public let retryInterval: Duration
    public let name = "redis-circuit-breaker"
    private let ping: @Sendable () -> RedisError?
    /// Runs after the probe found Redis back (on the service's thread).
    private let onClose: @Sendable () -> Void
    /// Its monotonic reading times how long the breaker is open. The waits (the probe's
    /// interval, /healthz's bound) are the machine's own: a thread sleeps on the real clock.
    private let clock: EndpointClock

    private struct State {
        var openedAt: ContinuousClock.Instant?
        var lastProbe: String?
        /// The refused server certificate the last failure met, nil once another failure
        /// (or a PONG) says otherwise.
        var tlsRefusal: ServerCertificateRefusal?
        /// While open: when the next probe is due (on the machine's monotonic clock).
        var nextProbeAt: ContinuousClock.Instant?
        /// The /healthz PING asked for and not answered yet, which every /healthz call
        /// meanwhile waits on.
        var healthPing: HealthPing?
    }

    private let state = Mutex(State())
    /// The service's loop: woken by an opening and by a /healthz PING asked for.
    private let task = PeriodicTask()

    /// One /healthz PING: its result once it has answered.
    private final class HealthPing: Sendable {
        let answered = Latch()
        let error = Mutex<RedisError?>(nil)
    }

    /// A probe a second while Redis does not answer.
    public static let defaultRetryInterval: Duration = .milliseconds(1000)
    /// The probe intervals the settings accept: 50 ms to a minute.
    public static let retryIntervalRange: ClosedRange<Duration> = .milliseconds(50) ... .milliseconds(60_000)

    /// `ping` returns nil on `PONG`, else the error; it may take the full Redis timeout.
    /// `onClose` runs (on the service's thread) each time the probe finds Redis back.
    public init(
        retryInterval: Duration = defaultRetryInterval, clock: EndpointClock = .system,
        ping: @escaping @Sendable () -> RedisError?,
        onClose: @escaping @Sendable () -> Void = {}
    ) {
        self.retryInterval = retryInterval
        self.clock = clock
        self.ping = ping
        self.onClose = onClose
    }

    /// True while Redis counts as down: callers spool without calling Redis.
    public var isOpen: Bool { state.withLock { $0.openedAt != nil } }

    /// A Redis call failed. Connection trouble (a timeout, a refused or broken connection, no
    /// primary from the sentinels) opens the breaker; a reply Redis gave does not.
    public func recordFailure(_ error: RedisError) {
        guard error.isConnectionError else { return }
        let stopping = task.isStopRequested
        let now = clock.monotonic()
        let refusal = ServerCertificateRefusal(error)
        let (opened, newRefusal) = state.withLock { state -> (Bool, Bool) in
            guard state.openedAt == nil, !stopping else {
                // Open already: a worker's refused certificate still names the cause.
                guard let refusal, state.openedAt != nil, state.tlsRefusal != refusal else { return (false, false) }
                state.tlsRefusal = refusal
                return (false, true)
            }
            state.openedAt = now
            state.lastProbe = nil
            state.tlsRefusal = refusal
            state.nextProbeAt = ContinuousClock.now + retryInterval
            return (true, refusal != nil)
        }
        // Every new refusal is logged with its reason and the setting to look at.
        if newRefusal, let refusal { refusal.log(when: "run_time") }
        guard opened else { return }
        EventLog.event(
            "redis_circuit_opened", level: "warning",
            [
                ("error", .string(error.code.rawValue)),
                ("retry_ms", .integer(retryInterval.wholeMilliseconds)),
            ])
        task.nudge()
    }

    /// Runs until `requestStop()`: the probes while open, the /healthz PINGs while closed.
    public func run() {
        task.run { step() }
        // Nobody answers a /healthz PING from here on: a waiter finds it unanswered at its bound.
    }

    /// Ends `run()` after the PING in progress; the breaker stays as it is.
    public func requestStop() { task.requestStop() }

    /// Redis's state for /healthz, within `within` whatever Redis does (on the monotonic clock).
    public func health(within: Duration) -> Health {
        let deadline = ContinuousClock.now + within
        enum Next {
            case open(Health)
            case wait(HealthPing, asked: Bool)
        }
        let next = state.withLock { state -> Next in
            if let openedAt = state.openedAt { return .open(openHealth(state, since: openedAt)) }
            if let running = state.healthPing { return .wait(running, asked: false) }
            let asked = HealthPing()
            state.healthPing = asked
            return .wait(asked, asked: true)
        }
        let healthPing: HealthPing
        switch next {
        case .open(let health): return health
        case .wait(let running, let asked):
            healthPing = running
            if asked { task.nudge() }
        }
        guard healthPing.answered.wait(until: deadline) else { return Health(answers: false, pingPending: true) }
        let error = healthPing.error.withLock { $0 }
        return state.withLock { state in
            if let openedAt = state.openedAt { return openHealth(state, since: openedAt) }
            return Health(answers: error == nil)
        }
    }

    // MARK: - Private

    /// One turn of the service: the /healthz PING asked for, or the probe that is due.
    /// Returns how long to wait for the next turn (a nudge ends the wait early).
    private func step() -> Duration {
        let asked = state.withLock { $0.healthPing }
        if let asked {
            let error = ping()
            if let error { recordFailure(error) }
            asked.error.withLock { $0 = error }
            state.withLock { $0.healthPing = nil }
            asked.answered.open()
        }
        guard let due = state.withLock({ $0.nextProbeAt }) else { return .seconds(3600) }
        let now = ContinuousClock.now
        guard now >= due else { return due - now }
        probe()
        return state.withLock { $0.nextProbeAt }.map { max($0 - ContinuousClock.now, .zero) } ?? .seconds(3600)
    }

    /// One probe while open: a `PONG` closes the breaker and runs `onClose`.
    private func probe() {
        let error = ping()
        let now = clock.monotonic()
        let refusal = error.flatMap(ServerCertificateRefusal.init)
        let (closed, newRefusal) = state.withLock { state -> (Duration?, Bool) in
            if let error {
                state.lastProbe = error.code.rawValue
                state.nextProbeAt = ContinuousClock.now + retryInterval
                let changed = refusal != nil && refusal != state.tlsRefusal
                state.tlsRefusal = refusal
                return (nil, changed)
            }
            let openFor = state.openedAt.map { now - $0 } ?? .zero
            state.openedAt = nil
            state.lastProbe = nil
            state.tlsRefusal = nil
            state.nextProbeAt = nil
            return (openFor, false)
        }
        if newRefusal, let refusal { refusal.log(when: "run_time") }
        if let openFor = closed {
            EventLog.event("redis_circuit_closed", [("open_ms", .integer(openFor.wholeMilliseconds))])
            onClose()
        }
    }

    private func openHealth(_ state: State, since: ContinuousClock.Instant) -> Health {
        Health(
            answers: false, openMilliseconds: (clock.monotonic() - since).wholeMilliseconds,
            lastProbe: state.lastProbe, tlsRefusal: state.tlsRefusal)
    }
}
