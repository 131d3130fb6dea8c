import SIWARedis
import SIWAStore

// The Redis topology from the settings: one Redis (`SIWA_REDIS_URL`), Sentinel
// (`SIWA_REDIS_SENTINELS` and its settings) or Cluster (`SIWA_REDIS_CLUSTER_NODES`), read
// once into one `RedisTopology`; every rule that ties these settings together is here.
extension ServerConfiguration {
    @Sendable static func sentinelList(_ text: String) throws(SettingProblem) -> [RedisNodeAddress] {
        switch RedisNodeAddress.list(parsing: text, field: .sentinels) {
        case .success(let parsed): return parsed
        case .failure(let error): throw SettingProblem(error.message)
        }
    }

    @Sendable static func sentinelMasterName(_ text: String) throws(SettingProblem) -> String {
        guard text.utf8.count <= 255, text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw SettingProblem("must be a name of visible ASCII characters")
        }
        return text
    }

    @Sendable static func clusterNodeList(_ text: String) throws(SettingProblem) -> [RedisNodeAddress] {
        switch RedisNodeAddress.list(parsing: text, field: .clusterNodes) {
        case .success(let parsed): return parsed
        case .failure(let error): throw SettingProblem(error.message)
        }
    }

    /// The three Sentinel settings go together: all or nothing (a password alone, or a
    /// master name alone, is a mistake worth stopping for).
    static func sentinelSettings(
        sentinels: [RedisNodeAddress]?, master: String?, password: String?
    ) throws(ConfigurationError) -> RedisTopology.Sentinel? {
        guard let sentinels, !sentinels.isEmpty else {
            if master != nil {
                throw ConfigurationError(
                    setting: "SIWA_REDIS_SENTINEL_MASTER", "is set but SIWA_REDIS_SENTINELS is not: name the sentinels")
            }
            if password != nil {
                throw ConfigurationError(
                    setting: "SIWA_REDIS_SENTINEL_PASSWORD",
                    "is set but SIWA_REDIS_SENTINELS is not: name the sentinels")
            }
            return nil
        }
        guard let master else {
            throw ConfigurationError(
                setting: "SIWA_REDIS_SENTINEL_MASTER",
                "is required with SIWA_REDIS_SENTINELS: the monitored master's name")
        }
        return RedisTopology.Sentinel(sentinels: sentinels, masterName: master, password: password)
    }

    /// The one topology: Sentinel or Cluster (never both), else one Redis at the URL. Cluster
    /// mode also wants database 0 (a cluster has no other) and a key prefix that is a hash
    /// tag, so the one apply script's keys share one slot.
    static func redisTopology(
        sentinel: RedisTopology.Sentinel?, clusterNodes: [RedisNodeAddress]?, endpoint: RedisEndpoint,
        keyPrefix: String
    ) throws(ConfigurationError) -> RedisTopology {
        guard let clusterNodes else { return sentinel.map { .sentinel($0) } ?? .single }
        if sentinel != nil {
            throw ConfigurationError(
                setting: "SIWA_REDIS_CLUSTER_NODES", "and SIWA_REDIS_SENTINELS are both set: choose one")
        }
        if endpoint.database != 0 {
            throw ConfigurationError(
                setting: "SIWA_REDIS_URL",
                "names database \(endpoint.database), but Redis Cluster has only database 0 (SIWA_REDIS_CLUSTER_NODES is set)"
            )
        }
        if !isHashTagPrefix(keyPrefix) {
            throw ConfigurationError(
                setting: "SIWA_KEY_PREFIX",
                "must begin with a hash tag such as {siwa} when SIWA_REDIS_CLUSTER_NODES is set: the apply script's keys must share one cluster slot"
            )
        }
        return .cluster(seeds: clusterNodes)
    }
}

extension RedisSettings {
    /// The topology's locator, for every connection of this process to share (nothing is
    /// asked yet): serve builds it once at start, an operator command once per run.
    /// `keyPrefix` places the contract's keys (in a cluster, their one slot).
    public func locator(
        keyPrefix: String, observers: RedisTopology.Observers = RedisTopology.Observers()
    ) -> RedisLocator {
        topology.locator(
            endpoint: endpoint, timeout: timeout, hashTagKey: RedisKeyLayout(prefix: keyPrefix).events,
            observers: observers)
    }

    /// A connection to the data node, with these settings' login and timeouts, found
    /// through `locator` (connects at its first command).
    public func connection(_ locator: RedisLocator) -> RedisConnection {
        RedisConnection(endpoint: endpoint, connectTimeout: timeout, commandTimeout: timeout, locator: locator)
    }
}
