/// What one call to refresh the JWKS did.
public enum JWKSRefreshOutcome: Sendable, Equatable {
    /// A usable JWKS was fetched and is now the current key set.
    case refreshed
    /// The fetch failed, or the document had no usable key; the last good keys stay.
    case failed
    /// No fetch was made: not due yet, or an unknown-kid refresh ran too recently.
    case skipped
    /// A fetch is running and this caller did not see its end: its wait is bounded
    /// (`Settings.unknownKeyIDWaitLimit`), and only `Settings.unknownKeyIDWaiters` callers
    /// may wait at once, so made-up kids cannot hold the workers.
    case stillRunning
}
