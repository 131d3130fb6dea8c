import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWAStore
import SIWAVerification

extension NotificationResponder {
    /// Fewer replicas than `SIWA_REDIS_MIN_REPLICAS` acknowledged an applied notification,
    /// or Redis refused the `PUBLISH`/`WAIT` that counts them (then nobody knows):
    /// a copy goes to the spool (fsync'd) before the 200, so a failover that loses the write
    /// re-applies it on replay, and one that kept it turns the replay into a `duplicate`.
    /// The replay of a copy kept after a refusal meets the same refusal and is blocked, named
    /// in /healthz, until the permission is granted. The answer stays what was applied.
    /// Returns a 503 only when the copy cannot be kept.
    func keepCopy(
        _ notification: VerifiedNotification, _ acknowledged: NotificationStore.Acknowledged, _ result: Reply
    )
        -> Reply?
    {
        if let refusal = acknowledged.replicaCheckRefusal {
            log.event(
                "redis_replica_check_refused", level: "error",
                [
                    ("error", .string(refusal.code.rawValue)), ("reason", .string(refusal.operatorMessage)),
                    ("outcome", .string(acknowledged.outcome.rawValue)), ("client_id", .string(notification.clientID)),
                ])
        } else {
            metrics.recordReplicaShortfall()
            log.event(
                "redis_replica_shortfall", level: "warning",
                [
                    ("replicas", .integer(Int64(acknowledged.replicas ?? 0))),
                    ("wanted", .integer(Int64(configuration.redis.minimumReplicas))),
                    ("outcome", .string(acknowledged.outcome.rawValue)), ("client_id", .string(notification.clientID)),
                ])
        }
        do {
            try spool.append(notification)
            drain?.nudge()
            return nil
        } catch {
            return Self.storeUnavailable(result, error)
        }
    }

    /// `/healthz`'s members about the circuit breaker, present only when Redis did not answer:
    /// `redis_circuit` (`open`: requests spool without calling Redis; `ping_timeout`: PING
    /// did not answer within /healthz's bound), how long it has been open, the last probe,
    /// and `redis_tls_refused` (the refusal, settings named) while a server certificate is refused.
    static func circuitMembers(_ health: RedisCircuitBreaker.Health) -> [(String, JSONValue)] {
        if let openMilliseconds = health.openMilliseconds {
            let refusal: [(String, JSONValue)] =
                health.tlsRefusal.map { [("redis_tls_refused", .string($0.message))] } ?? []
            return [
                ("redis_circuit", .string("open")), ("redis_circuit_open_ms", .integer(openMilliseconds)),
                ("redis_last_probe", health.lastProbe.map { .string($0) } ?? .null),
            ] + refusal
        }
        return health.pingPending ? [("redis_circuit", .string("ping_timeout"))] : []
    }

    /// `/healthz`'s member naming the primary in use, with Sentinel or Redis Cluster.
    func redisPrimaryMembers() -> [(String, JSONValue)] {
        if case .single = redisLocator { return [] }
        return [("redis_primary", redisLocator.current.map { .string($0.description) } ?? .null)]
    }
}
