import SIWARedis
import SIWASettings
import SIWAStore

/// A start that did not get far enough to serve: the exit status to return.
struct StartRefused: Error {
    let exitStatus: Int32
}

extension ServeCommand {
    /// Builds the topology's locator once, with serve's log lines, and asks it once before
    /// serving (`locatePrimaryAtStart`, `locateClusterAtStart`): the one value every part
    /// that talks to Redis gets. A refusal names the setting to fix; a refused certificate is
    /// returned (an outage, as at run time).
    static func locateAtStart(
        _ configuration: ServerConfiguration
    ) -> Result<(RedisLocator, ServerCertificateRefusal?), StartRefused> {
        let keyPrefix = configuration.store.keyPrefix
        let slot = RedisClusterLocator.hashSlot(of: Array(RedisKeyLayout(prefix: keyPrefix).events.utf8))
        let locator = configuration.redis.locator(
            keyPrefix: keyPrefix,
            observers: RedisTopology.Observers(sentinel: logSentinelEvent, cluster: { logClusterEvent($0, slot: slot) })
        )
        let found: Result<ServerCertificateRefusal?, StartRefused> =
            switch locator {
            case .single: .success(nil)
            case .sentinel(let sentinels): locatePrimaryAtStart(configuration, sentinels)
            case .cluster(let cluster): locateClusterAtStart(cluster)
            }
        return found.map { (locator, $0) }
    }
}
