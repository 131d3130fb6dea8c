import SIWAVerification

/// What the request path asks of the service that drains the spool into Redis (the
/// `SpoolReplayer`), and no more: the responder depends on this, not on the replayer.
public protocol SpoolDraining: Sendable {
    /// A record was spooled (or Redis is back): drain now rather than at the next poll.
    func nudge()

    /// Why spooled records wait although Redis answers, or nil; /healthz names it.
    var blockedReason: String? { get }

    /// An `account-deleted` was stored live: the records of that user kept aside
    /// (`rejected/`) lose their email address.
    func accountDeleted(_ notification: VerifiedNotification)
}

extension SpoolReplayer: SpoolDraining {}
