extension ServerConfiguration {
    /// `SIWA_REDIS_SENTINELS`, `SIWA_REDIS_SENTINEL_MASTER`, `SIWA_REDIS_SENTINEL_PASSWORD`:
    /// all or nothing (a password alone, or a master name alone, is a mistake worth stopping for).
    static func sentinelSettings(_ values: [String: String]) throws(ConfigurationError) -> (
        [RedisPrimaryLocator.Sentinel], String?, String?
    ) {
        let master = values["SIWA_REDIS_SENTINEL_MASTER"].flatMap { $0.isEmpty ? nil : $0 }
        let password = values["SIWA_REDIS_SENTINEL_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 }
        guard let list = values["SIWA_REDIS_SENTINELS"], !list.isEmpty else {
            if master != nil {
                throw ConfigurationError(
                    setting: "SIWA_REDIS_SENTINEL_MASTER", "is set but SIWA_REDIS_SENTINELS is not: name the sentinels")
            }
            if password != nil {
                throw ConfigurationError(
                    setting: "SIWA_REDIS_SENTINEL_PASSWORD",
                    "is set but SIWA_REDIS_SENTINELS is not: name the sentinels"
                )
            }
            return ([], nil, nil)
        }
        let sentinels: [RedisPrimaryLocator.Sentinel]
        switch RedisPrimaryLocator.parseSentinels(list) {
        case .success(let parsed): sentinels = parsed
        case .failure(let error):
            throw ConfigurationError(
                setting: "SIWA_REDIS_SENTINELS", String(error.message.dropFirst("SIWA_REDIS_SENTINELS ".count)))
        }
        guard let master else {
            throw ConfigurationError(
                setting: "SIWA_REDIS_SENTINEL_MASTER",
                "is required with SIWA_REDIS_SENTINELS: the monitored master's name")
        }
        guard master.utf8.count <= 255, master.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigurationError(
                setting: "SIWA_REDIS_SENTINEL_MASTER", "must be a name of visible ASCII characters")
        }
        return (sentinels, master, password)
    }
}
