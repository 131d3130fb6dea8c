import SIWARedis
import SIWASupport
import SIWAVerification

extension NotificationStore {
    /// What applying one notification did, and how many replicas acknowledged it.
    public struct Acknowledged: Sendable, Equatable {
        public let outcome: Outcome
        /// Replicas that acknowledged the write within the timeout; nil when none were asked for,
        /// or when Redis refused to say (`replicaCheckRefusal`).
        public let replicas: Int?
        /// Fewer replicas than asked for acknowledged in time: the primary may lose the write
        /// with its machine, so the caller keeps a copy (the spool) until a replay confirms it.
        public let isShortfall: Bool
        /// Redis answered the probe `PUBLISH` or the `WAIT` with an error (a user without
        /// `+wait`, or without the probe channel): nobody knows which replicas hold the write.
        /// Not a shortfall: a deployment refusal, named with Redis's text; the caller keeps a
        /// copy as for a shortfall, and the replay of that copy is blocked until it is fixed.
        public let replicaCheckRefusal: RedisError?

        public init(outcome: Outcome, replicas: Int?, isShortfall: Bool, replicaCheckRefusal: RedisError? = nil) {
            self.outcome = outcome
            self.replicas = replicas
            self.isShortfall = isShortfall
            self.replicaCheckRefusal = replicaCheckRefusal
        }
    }

    /// Applies one notification, then, when the store's `minimumReplicas` > 0, sends `WAIT` on
    /// the same connection for that many replicas (at most its `replicaTimeout`); in a cluster,
    /// on the one that ran the script (the migration target's after an `ASK`).
    ///
    /// WAIT counts the replicas that hold everything this connection wrote. A `duplicate`
    /// or `stored` wrote nothing, yet the first copy may still be unreplicated (its request may have
    /// ended in a timeout), so one PUBLISH on `<prefix>:replication-probe` (no subscriber,
    /// replicated like any write) moves this connection's replication offset to now first.
    /// A WAIT that cannot be sent or answered (the connection broke after the script ran)
    /// counts as a shortfall: the write may or may not have reached a replica. An error
    /// reply to either (NOPERM, ...) is `replicaCheckRefusal`, never "0 replicas".
    public func applyAcknowledged(
        _ notification: VerifiedNotification, receivedAt: Int64, earlierAttempt: Int64? = nil
    ) throws(RedisError) -> Acknowledged {
        try acknowledge(apply(notification, receivedAt: receivedAt, earlierAttempt: earlierAttempt))
    }

    /// Applies one verified Security Event Token from Google (`apply(_:receivedAt:)`), then
    /// waits for `minimumReplicas` exactly as `applyAcknowledged` does for Apple's: Google's
    /// writes are held to the same durability.
    public func applyAcknowledged(_ securityEvent: VerifiedSecurityEvent, receivedAt: Int64) throws(RedisError)
        -> Acknowledged
    {
        try acknowledge(apply(securityEvent, receivedAt: receivedAt))
    }

    /// The replica check after a write on this connection (see `applyAcknowledged`).
    private func acknowledge(_ outcome: Outcome) -> Acknowledged {
        guard minimumReplicas > 0 else { return Acknowledged(outcome: outcome, replicas: nil, isShortfall: false) }
        let milliseconds = max(1, replicaTimeout.wholeMilliseconds)
        var replicas = 0
        do {
            // On the node that ran the script: in a cluster during a migration, the target of an ASK.
            if outcome == .duplicate || outcome == .stored {
                _ = try connection.commandAboutLastWrite("PUBLISH", keys.replicationProbe, "")
            }
            let reply = try connection.commandAboutLastWrite("WAIT", String(minimumReplicas), String(milliseconds))
            guard let count = reply.integer else {
                let refusal = RedisError(.unexpectedReply, "WAIT did not answer a number of replicas")
                return Acknowledged(outcome: outcome, replicas: nil, isShortfall: false, replicaCheckRefusal: refusal)
            }
            replicas = Int(count)
        } catch  where !error.isConnectionError {
            return Acknowledged(outcome: outcome, replicas: nil, isShortfall: false, replicaCheckRefusal: error)
        } catch {
            replicas = 0
        }
        return Acknowledged(outcome: outcome, replicas: replicas, isShortfall: replicas < minimumReplicas)
    }
}
