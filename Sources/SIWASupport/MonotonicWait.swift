import Foundation

extension NSCondition {
    /// Waits (the lock held) until signalled or until `deadline` on the monotonic clock.
    /// False once the deadline has passed. The wait is cut into short slices measured
    /// with `ContinuousClock`, so a wall clock stepped forward cannot end a deadline early
    /// and one stepped back delays it by at most one slice's worth of its own step.
    /// Callers loop on their own condition, so an early return costs one more check.
    public func wait(untilMonotonic deadline: ContinuousClock.Instant) -> Bool {
        let left = deadline - ContinuousClock.now
        guard left > .zero else { return false }
        let slice = min(left, .milliseconds(200))
        let (seconds, attoseconds) = slice.components
        _ = wait(until: Date(timeIntervalSinceNow: Double(seconds) + Double(attoseconds) / 1e18))
        return ContinuousClock.now < deadline
    }
}
