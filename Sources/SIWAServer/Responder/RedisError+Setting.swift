import SIWARedis

extension RedisError.Field {
    /// The setting that configures this field: SIWARedis says which configured thing failed,
    /// the application names the setting.
    public var setting: String {
        switch self {
        case .url: SettingKey.redisURL.name
        case .sentinels: SettingKey.redisSentinels.name
        case .sentinelMasterName: SettingKey.redisSentinelMaster.name
        case .sentinelPassword: SettingKey.redisSentinelPassword.name
        case .sentinelTLS: SettingKey.redisSentinelTLS.name
        case .clusterNodes: SettingKey.redisClusterNodes.name
        case .tlsCAFile: SettingKey.redisTLSCAFile.name
        case .tlsCertificateFile: SettingKey.redisTLSCertificateFile.name
        case .tlsKeyFile: SettingKey.redisTLSKeyFile.name
        }
    }
}

extension RedisError {
    /// The message as an operator reads it: after the setting its field names, when it is
    /// about one (`SIWA_REDIS_SENTINEL_MASTER: no sentinel monitors ...`).
    public var operatorMessage: String {
        guard let field else { return message }
        return "\(field.setting): \(message)"
    }
}
