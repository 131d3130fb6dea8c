import Foundation
import Glibc
import Synchronization

/// The services of `serve` and the one place its signals are handled. Services start in
/// the order given, each on a thread of its own (after its `start()` on the caller's
/// thread); `run()` waits until something stops the group (SIGTERM or SIGINT, `requestStop()`,
/// or a service whose `run()` returned on its own), then asks every service to stop at once,
/// last started first, and waits for each, in that order, until one shared deadline.
public final class ServiceGroup: Sendable {
    /// What stopped the group.
    public enum StopCause: Sendable, Equatable {
        /// SIGTERM or SIGINT (the graceful-shutdown signals).
        case signal(Int32)
        /// `requestStop()` was called.
        case requested
        /// This service's `run()` returned before a stop was asked for: the group does not
        /// keep running half-started.
        case serviceReturned(String)
    }

    /// How a run of the group ended.
    public struct Stopped: Sendable, Equatable {
        public let cause: StopCause
        /// Whether every service returned before the deadline.
        public let allReturned: Bool

        public init(cause: StopCause, allReturned: Bool) {
            self.cause = cause
            self.allReturned = allReturned
        }
    }

    private struct Started: Sendable {
        let service: any Service
        let finished: Latch
    }

    private struct State {
        var started: [Started] = []
        var cause: StopCause?
        var signals: SignalWatcher?
    }

    private let state = Mutex(State())
    /// Opens when something stops the group (the first cause wins).
    private let stopNeeded = Latch()

    public init() {}

    /// SIGTERM and SIGINT stop the group; SIGHUP runs `onHangUp` (on a thread of its own)
    /// and stops nothing; SIGPIPE is ignored. Call it first, before any service starts: a
    /// signal during the start-up then stops what has started. The previous handlers come
    /// back at the end of `stop(until:)`.
    public func handleSignals(onHangUp: @escaping @Sendable () -> Void = {}) throws(SignalSetupError) {
        let watcher = try SignalWatcher(
            onSignal: { [self] signal in stop(because: .signal(signal)) }, onHangUp: onHangUp)
        state.withLock { $0.signals = watcher }
    }

    /// Prepares `service` (its `start()`, here), then runs it on a thread of its own. A
    /// failed `start()` is thrown and nothing of the service runs.
    public func start<S: Service>(_ service: S) throws(S.StartError) {
        try service.start()
        let finished = Latch()
        let lateForStop = state.withLock { state -> Bool in
            state.started.append(Started(service: service, finished: finished))
            return state.cause != nil
        }
        let thread = Thread { [self] in
            service.run()
            finished.open()
            // A service back before anyone asked: the group stops, and says which one (after
            // a stop was asked for, this changes nothing).
            stop(because: .serviceReturned(service.name))
        }
        thread.name = service.name
        thread.start()
        // Started after the group was told to stop (a signal during the start-up).
        if lateForStop { service.requestStop() }
    }

    /// Asks the group to stop (and so every service), without waiting.
    public func requestStop() { stop(because: .requested) }

    /// Waits until something stops the group, calls `whenStopping` with the cause and the
    /// one shutdown deadline (now + `shutdownTimeout`, monotonic), then stops every service
    /// until that deadline.
    public func run(
        shutdownTimeout: Duration, whenStopping: (StopCause, ContinuousClock.Instant) -> Void = { _, _ in }
    ) -> Stopped {
        stopNeeded.wait()
        let deadline = ContinuousClock.now + shutdownTimeout
        let cause = state.withLock { $0.cause } ?? .requested
        whenStopping(cause, deadline)
        return Stopped(cause: cause, allReturned: stop(until: deadline))
    }

    /// Asks every service to stop, then waits for each, last started first, until
    /// `deadline`; then gives the signals back. True when all of them returned in time.
    @discardableResult
    public func stop(until deadline: ContinuousClock.Instant) -> Bool {
        stop(because: .requested)
        var allStopped = true
        for entry in state.withLock({ $0.started }).reversed() where !entry.finished.wait(until: deadline) {
            allStopped = false
        }
        let signals = state.withLock { state in
            defer { state.signals = nil }
            return state.signals
        }
        signals?.uninstall()
        return allStopped
    }

    /// The first call keeps its cause and asks every service started so far (a service
    /// started later is asked by `start`); later calls change nothing.
    private func stop(because cause: StopCause) {
        let toAsk = state.withLock { state -> [Started]? in
            guard state.cause == nil else { return nil }
            state.cause = cause
            return state.started
        }
        guard let toAsk else { return }
        stopNeeded.open()
        for entry in toAsk.reversed() { entry.service.requestStop() }
    }
}
