import Dispatch
import Synchronization

/// The loop of a periodic service: a step at once, then again after the wait that step
/// asked for, until a stop is asked for. A nudge, or the stop, ends a wait early. Waits
/// count on the monotonic clock, so a wall clock stepped back cannot hold a step.
public final class PeriodicTask: Sendable {
    private struct State {
        var stopRequested = false
        var nudged = false
    }

    private let state = Mutex(State())
    /// Signalled by a stop or by the first nudge of a wait; a waiter checks `state`, so a
    /// stale signal costs one check.
    private let wakeup = DispatchSemaphore(value: 0)
    /// A nudge starts a step no sooner than this after the last step began: nudges in
    /// between are gathered into one step, and wake the thread once, not once each.
    public let nudgeSpacing: Duration

    public init(nudgeSpacing: Duration = .zero) {
        self.nudgeSpacing = nudgeSpacing
    }

    /// Whether a stop was asked for: a long step checks it between its items.
    public var isStopRequested: Bool { state.withLock { $0.stopRequested } }

    /// Ends the loop after the step in progress (or the wait) ends.
    public func requestStop() {
        state.withLock { $0.stopRequested = true }
        wakeup.signal()
    }

    /// Ends the current wait (or the next one, if a step is running) at once, or once
    /// `nudgeSpacing` has passed since the last step began. Only the first nudge of a wait
    /// signals the thread: a burst of them costs one wake.
    public func nudge() {
        let first = state.withLock { state -> Bool in
            defer { state.nudged = true }
            return !state.nudged
        }
        if first { wakeup.signal() }
    }

    /// Runs `step` until a stop is asked for; `step` returns how long to wait before the next.
    public func run(_ step: () -> Duration) {
        while !isStopRequested {
            let began = ContinuousClock.now
            let wait = step()
            guard !isStopRequested else { break }
            sleep(for: wait, nudgedNotBefore: began + nudgeSpacing)
        }
    }

    /// Waits `interval` on the monotonic clock, or until a stop, or a nudge (taken at
    /// `earliest` at the soonest).
    private func sleep(for interval: Duration, nudgedNotBefore earliest: ContinuousClock.Instant) {
        var deadline = ContinuousClock.now + interval
        defer { state.withLock { $0.nudged = false } }
        while true {
            let (stopped, nudged) = state.withLock { ($0.stopRequested, $0.nudged) }
            if stopped { return }
            if nudged {
                if ContinuousClock.now >= earliest { return }
                deadline = min(deadline, earliest)
            }
            guard wakeup.wait(timeout: Latch.dispatchTime(deadline)) == .success else { return }
        }
    }
}
