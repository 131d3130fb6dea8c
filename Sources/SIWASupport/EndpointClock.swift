import Foundation

/// The clock the long-running parts read, injected so tests can drive it.
///
/// Every interval and deadline (when a refresh is due, how long since the last fetch) is
/// measured on `monotonic`, which a wall clock stepped back or forward cannot move. The
/// wall clock is read only where a wall time is shown or stored (the JWKS age in /metrics,
/// a cache file's time).
public struct EndpointClock: Sendable {
    /// Now on the monotonic clock.
    public let monotonic: @Sendable () -> ContinuousClock.Instant
    /// Now on the wall clock, in Unix seconds.
    public let wallSeconds: @Sendable () -> Int64

    public init(
        monotonic: @escaping @Sendable () -> ContinuousClock.Instant,
        wallSeconds: @escaping @Sendable () -> Int64
    ) {
        self.monotonic = monotonic
        self.wallSeconds = wallSeconds
    }

    /// The machine's clocks.
    public static let system = EndpointClock(
        monotonic: { ContinuousClock.now }, wallSeconds: { Int64(Date().timeIntervalSince1970) })
}
