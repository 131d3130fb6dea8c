import SIWAStore

/// What replay did with one record it took out of the spool.
public enum SpoolReplayStep: Sendable, Hashable {
    /// Redis took the record, with this outcome (applied, a duplicate, stale...).
    case stored(NotificationStore.Outcome)
    /// Redis refused the record for a reason about that record alone (a rejected record): kept in
    /// `rejected/` (see `SpoolSetAsideStore`) and is not applied.
    case rejected

    /// The name in the `spool_replayed` log line and the bench's counts.
    public var name: String {
        switch self {
        case .stored(let outcome): outcome.rawValue
        case .rejected: "rejected"
        }
    }
}
