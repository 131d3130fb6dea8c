import Foundation
import Glibc
import Synchronization

/// The services of `serve` and the one place its signals are handled. Services start in
/// the order given, each on a thread of its own (after its `start()` on the caller's
/// thread); `run()` waits until something stops the group (SIGTERM or SIGINT, `requestStop()`,
/// or a service whose `run()` returned on its own), then stops them one by one, last started
/// first: each is asked only once the one started after it has returned, so a service
/// finishing its work (the FastCGI server draining accepted requests) still has every
/// service started before it (the breaker, the JWKS refresher, the sentinel watchers).
///
/// All of it within one deadline. A service still running when the stop is nine tenths
/// through (`lastShare`) is not waited for alone any longer: every service not yet asked is
/// asked then, and the group waits for all of them, that one too, until the deadline. So a
/// service that never returns delays the others' stop by at most nine tenths of the time,
/// and each of them has the last tenth to return.
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

    private final class Started: Sendable {
        let service: any Service
        let finished = Latch()
        private let asked = Atomic(false)

        init(service: any Service) { self.service = service }

        /// Asks the service to stop, once.
        func ask() {
            guard !asked.exchange(true, ordering: .acquiringAndReleasing) else { return }
            service.requestStop()
        }
    }

    /// The part of the shutdown time kept for the services started before one that is still
    /// running (see the type's comment): a tenth.
    public static let lastShare = 10

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
    /// failed `start()` is thrown and nothing of the service runs. A service started after
    /// the group was told to stop (a signal during the start-up) is asked to stop at once.
    public func start<S: Service>(_ service: S) throws(S.StartError) {
        try service.start()
        let entry = Started(service: service)
        let lateForStop = state.withLock { state -> Bool in
            state.started.append(entry)
            return state.cause != nil
        }
        let thread = Thread { [self] in
            service.run()
            entry.finished.open()
            // A service back before anyone asked: the group stops, and says which one (after
            // a stop was asked for, this changes nothing).
            stop(because: .serviceReturned(service.name))
        }
        thread.name = service.name
        thread.start()
        // Started after the group was told to stop (a signal during the start-up).
        if lateForStop { entry.ask() }
    }

    /// Asks the group to stop (`run()` then stops every service), without waiting.
    public func requestStop() { stop(because: .requested) }

    /// Waits until something stops the group, calls `whenStopping` with the cause and the
    /// one shutdown deadline (now + `shutdownTimeout`, monotonic), then stops the services one
    /// by one, last started first, until that deadline (`stop(until:)`).
    public func run(
        shutdownTimeout: Duration, whenStopping: (StopCause, ContinuousClock.Instant) -> Void = { _, _ in }
    ) -> Stopped {
        stopNeeded.wait()
        let deadline = ContinuousClock.now + shutdownTimeout
        let cause = state.withLock { $0.cause } ?? .requested
        whenStopping(cause, deadline)
        return Stopped(cause: cause, allReturned: stop(until: deadline))
    }

    /// Stops the services last started first, each asked once the one after it has returned,
    /// until `deadline` (a service still running at nine tenths of the time left: every other
    /// is asked then, and all are waited for until `deadline`); then gives the signals back.
    /// True when all of them returned in time.
    @discardableResult
    public func stop(until deadline: ContinuousClock.Instant) -> Bool {
        stop(because: .requested)
        let left = deadline - ContinuousClock.now
        let alone = deadline - (left > .zero ? left / Self.lastShare : .zero)
        let order = Array(state.withLock({ $0.started }).reversed())
        var allStopped = true
        for (index, entry) in order.enumerated() {
            entry.ask()
            if entry.finished.wait(until: alone) { continue }
            // Still running: the rest are asked now, and every one of them waited for.
            for later in order[(index + 1)...] { later.ask() }
            allStopped = order[index...].allSatisfy { $0.finished.wait(until: deadline) }
            break
        }
        let signals = state.withLock { state in
            defer { state.signals = nil }
            return state.signals
        }
        signals?.uninstall()
        return allStopped
    }

    /// The first call keeps its cause and lets `run()` go on to stop the services (a service
    /// started later is asked by `start`); later calls change nothing. It asks no service
    /// itself: that is the stop's order, on `run()`'s thread.
    private func stop(because cause: StopCause) {
        let first = state.withLock { state -> Bool in
            guard state.cause == nil else { return false }
            state.cause = cause
            return true
        }
        if first { stopNeeded.open() }
    }
}
