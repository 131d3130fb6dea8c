import Foundation

/// The clock the long-running parts read, injected so tests can drive it: serve makes one
/// (`system`) and hands the same one to everything.
///
/// Every interval and deadline (when a refresh is due, how long since the last fetch, how
/// long the Redis breaker has been open, when the spool's retention cleanup runs next) is
/// measured on `monotonic`, which a wall clock stepped back or forward cannot move. The
/// wall clock is read only where a wall time is shown or stored (receive times in Redis,
/// spool record times, the JWKS age in /metrics, a cache file's time, a token's expiry).
public struct EndpointClock: Sendable {
    /// Now on the monotonic clock.
    public let monotonic: @Sendable () -> ContinuousClock.Instant
    /// Now on the wall clock, in Unix milliseconds: the one wall reading.
    public let wallMilliseconds: @Sendable () -> Int64

    public init(
        monotonic: @escaping @Sendable () -> ContinuousClock.Instant,
        wallMilliseconds: @escaping @Sendable () -> Int64
    ) {
        self.monotonic = monotonic
        self.wallMilliseconds = wallMilliseconds
    }

    /// Now on the wall clock, in Unix seconds (whole seconds, from `wallMilliseconds`).
    public func wallSeconds() -> Int64 { wallMilliseconds() / 1000 }

    /// The machine's clocks.
    public static let system = EndpointClock(
        monotonic: { ContinuousClock.now }, wallMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
}
