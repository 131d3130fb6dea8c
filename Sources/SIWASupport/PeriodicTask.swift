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
    /// Signalled by a stop or a nudge; a waiter checks `state`, so a stale signal costs one check.
    private let wakeup = DispatchSemaphore(value: 0)

    public init() {}

    /// Whether a stop was asked for: a long step checks it between its items.
    public var isStopRequested: Bool { state.withLock { $0.stopRequested } }

    /// Ends the loop after the step in progress (or the wait) ends.
    public func requestStop() {
        state.withLock { $0.stopRequested = true }
        wakeup.signal()
    }

    /// Ends the current wait (or the next one, if a step is running) at once.
    public func nudge() {
        state.withLock { $0.nudged = true }
        wakeup.signal()
    }

    /// Runs `step` until a stop is asked for; `step` returns how long to wait before the next.
    public func run(_ step: () -> Duration) {
        while !isStopRequested {
            let wait = step()
            guard !isStopRequested else { break }
            sleep(for: wait)
        }
    }

    /// Waits `interval` on the monotonic clock, or until a stop or a nudge.
    private func sleep(for interval: Duration) {
        let deadline = ContinuousClock.now + interval
        while true {
            let woken = state.withLock { state -> Bool in
                defer { state.nudged = false }
                return state.stopRequested || state.nudged
            }
            if woken { return }
            guard wakeup.wait(timeout: Latch.dispatchTime(deadline)) == .success else { return }
        }
    }
}
