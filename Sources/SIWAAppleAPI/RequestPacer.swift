import Foundation
import SIWASupport
import Synchronization

/// Spaces the starts of requests to Apple at least `interval` apart on the monotonic clock
/// (`--rate` of reconcile, revoke and transfer), and holds every request back while Apple
/// has asked to wait: a `429` halves the pace for the rest of the run and no request of
/// any user starts before its `Retry-After` has passed.
public final class RequestPacer: Sendable {
    public let interval: Duration
    /// The slowest pace a run of `429`s can bring: one request every 100 seconds.
    public static let slowest: Duration = .seconds(100)
    /// The longest `Retry-After` honoured as given; a longer one (or a date further ahead)
    /// is held for this long, so a wrong header cannot park a run for days.
    public static let longestHold: Duration = .seconds(3600)

    private struct State {
        var current: Duration
        var next: ContinuousClock.Instant
    }

    private let state: Mutex<State>
    /// Told each hold a `429` asks for (its length), before the wait: the command logs it.
    private let onHold: @Sendable (Duration) -> Void

    public init(interval: Duration, onHold: @escaping @Sendable (Duration) -> Void = { _ in }) {
        self.interval = interval
        self.onHold = onHold
        state = Mutex(State(current: interval, next: .now))
    }

    /// The interval between request starts now.
    public var currentInterval: Duration { state.withLock { $0.current } }

    /// A `429`: the pace halves (down to `slowest`) and no request starts for `hold`
    /// (Apple's `Retry-After`, at most `longestHold`).
    public func throttled(hold: Duration) {
        self.hold(hold, slowingDown: true)
    }

    /// A `503` with a `Retry-After`: no request starts for `hold`; the pace stays.
    public func unavailable(hold: Duration) {
        self.hold(hold, slowingDown: false)
    }

    private func hold(_ hold: Duration, slowingDown: Bool) {
        let hold = min(max(hold, .zero), Self.longestHold)
        onHold(hold)
        let until = ContinuousClock.now + hold
        state.withLock { state in
            if slowingDown { state.current = min(state.current * 2, Self.slowest) }
            state.next = max(state.next, until)
        }
    }

    /// Takes the next free start time, then sleeps until it.
    public func wait() {
        let now = ContinuousClock.now
        let start = state.withLock { state -> ContinuousClock.Instant in
            let start = max(now, state.next)
            state.next = start + state.current
            return start
        }
        Self.sleep(for: start - now)
    }

    /// Sleeps the whole `duration`, resuming after a signal interrupts the sleep.
    private static func sleep(for duration: Duration) {
        guard duration > .zero else { return }
        var request = duration.timeSpec
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0, errno == EINTR { request = remaining }
    }
}
