import SIWARedis
import SIWASettingKeys
import SIWAStore
import SIWATelemetry

extension ServeCommand {
    /// With `SIWA_REDIS_CLUSTER_NODES`: asks the cluster once for the slot's primary before
    /// serving. Nodes that do not answer are no reason to refuse to start (notifications
    /// are spooled meanwhile, and /healthz says 503), nor is a node certificate the endpoint
    /// refuses (an outage as at run time: it is returned, for `--check` to report); nodes
    /// that answer but are not a cluster, or refuse the login, and a TLS file of ours that
    /// cannot be used, are a setting to fix (exit status 2, naming it).
    static func locateClusterAtStart(_ cluster: RedisClusterLocator) -> Result<
        ServerCertificateRefusal?, StartRefused
    > {
        do {
            try cluster.discover()
        } catch  where error.code == .tlsRefused {
            guard let refusal = ServerCertificateRefusal(error) else {
                return .failure(refuse(setting: (error.field ?? .tlsCAFile).setting, message: error.operatorMessage))
            }
            return .success(refusal)
        } catch  where error.code != .clusterRefused {
            EventLog.event(
                "redis_primary_unknown", level: "warning",
                [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
        } catch {
            return .failure(refuse(setting: (error.field ?? .clusterNodes).setting, message: error.operatorMessage))
        }
        return .success(nil)
    }

    /// What the cluster locator reports, as one JSON line each: which node named which owner,
    /// and why an owner was not used.
    @Sendable static func logClusterEvent(_ event: RedisClusterLocator.Event, slot: Int) {
        switch event {
        case .nodeNamedUnusableOwner(let node, let owner, let reason):
            EventLog.event(
                "redis_cluster_node_stale", level: "warning",
                [
                    ("node", .string(node.description)), ("named", .string(owner.description)),
                    ("slot", .integer(Int64(slot))), ("reason", .string(reason)),
                ])
        case .primaryFound(let node, let primary, let previous):
            EventLog.event(
                "redis_cluster_primary_found",
                [
                    ("node", .string(node.description)), ("primary", .string(primary.description)),
                    ("previous", previous.map { .string($0.description) } ?? .null), ("role", .string("master")),
                    ("slot", .integer(Int64(slot))),
                ])
        }
    }
}
