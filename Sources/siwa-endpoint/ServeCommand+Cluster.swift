import SIWARedis
import SIWAServer

extension ServeCommand {
    /// With `SIWA_REDIS_CLUSTER_NODES`: asks the cluster once for the slot's primary before
    /// serving. Nodes that do not answer are no reason to refuse to start (notifications
    /// are spooled meanwhile, and /healthz says 503); nodes that answer but are not a
    /// cluster, or refuse the login, are a setting to fix (exit status 2, naming it).
    static func locateClusterAtStart(_ configuration: ServerConfiguration) -> Result<
        RedisClusterLocator?, StartRefused
    > {
        guard
            let cluster = OperatorSettings.clusterLocator(
                configuration.redis, keyPrefix: configuration.store.keyPrefix)
        else { return .success(nil) }
        do {
            let primary = try cluster.discover()
            EventLog.event(
                "redis_cluster_primary_found",
                [("primary", .string(primary.description)), ("slot", .integer(Int64(cluster.slot)))])
        } catch  where error.code != .clusterRefused {
            EventLog.event(
                "redis_primary_unknown", level: "warning",
                [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
        } catch {
            return .failure(refuse(setting: (error.field ?? .clusterNodes).setting, message: error.operatorMessage))
        }
        return .success(cluster)
    }
}
