extension NotificationStore {
    /// What applying one notification did.
    public enum Outcome: String, Sendable, Equatable {
        /// User state moved forward; stream entry `applied=1`, published `"applied":true`.
        case applied
        /// The jti was seen before: nothing at all changed (no stream entry, no message).
        case duplicate
        /// An earlier call for this same delivery, whose reply was lost (it timed out, or its
        /// connection dropped after the script ran), already wrote it: its seen marker holds
        /// that call's receive time. This call changed nothing; what that call decided
        /// (applied, stale, recorded) is in its stream entry.
        case stored
        /// Older than the state held (or an email event after account deletion): no
        /// user field changed; marked seen; stream entry `applied=0`, published
        /// `"applied":false`, so an out-of-order delivery stays visible.
        case stale
        /// An unknown type: no user state changed; marked seen; stream entry
        /// `applied=0`, published `"applied":false`.
        case recorded
    }
}
