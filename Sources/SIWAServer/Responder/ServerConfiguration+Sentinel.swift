import SIWARedis

extension ServerConfiguration {
    @Sendable static func sentinelList(_ text: String) throws(SettingProblem) -> [RedisPrimaryLocator.Sentinel] {
        switch RedisPrimaryLocator.parseSentinels(text) {
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

    /// The three Sentinel settings go together: all or nothing (a password alone, or a
    /// master name alone, is a mistake worth stopping for).
    static func sentinelSettings(
        sentinels: [RedisPrimaryLocator.Sentinel]?, master: String?, password: String?
    ) throws(ConfigurationError) -> SentinelSettings? {
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
        return SentinelSettings(sentinels: sentinels, masterName: master, password: password)
    }

    @Sendable static func clusterNodeList(_ text: String) throws(SettingProblem) -> [RedisClusterLocator.Node] {
        switch RedisClusterLocator.parseNodes(text) {
        case .success(let parsed): return parsed
        case .failure(let error):
            throw SettingProblem(error.message)
        }
    }

    /// Cluster mode: no Sentinel beside it, database 0 (a cluster has no other), and a key
    /// prefix that is a hash tag, so the one apply script's keys share one slot.
    static func checkClusterSettings(
        _ nodes: [RedisClusterLocator.Node]?, sentinel: SentinelSettings?, endpoint: RedisEndpoint, keyPrefix: String
    ) throws(ConfigurationError) {
        guard nodes != nil else { return }
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
    }
}
