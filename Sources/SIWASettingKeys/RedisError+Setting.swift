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
        case .tlsServerName: SettingKey.redisTLSServerName.name
        case .tlsCertificateFile: SettingKey.redisTLSCertificateFile.name
        case .tlsKeyFile: SettingKey.redisTLSKeyFile.name
        }
    }
}

extension RedisError {
    /// The message as an operator reads it: after the setting its field names, when it is
    /// about one (`SIWA_REDIS_SENTINEL_MASTER: no sentinel monitors ...`), and after a
    /// refused server certificate what it had to satisfy, naming the settings.
    public var operatorMessage: String {
        let text = field.map { "\($0.setting): \(message)" } ?? message
        guard let certificateRefusal else { return text }
        return "\(text) (\(certificateRefusal.operatorHint))"
    }
}

extension RedisError.CertificateRefusal {
    /// `the server's certificate must chain to SIWA_REDIS_TLS_CA_FILE, be valid now and name
    /// 'localhost', SIWA_REDIS_TLS_SERVER_NAME`: what to check, in settings.
    public var operatorHint: String {
        let trustText = trust?.setting ?? "the system trust store"
        let nameText = nameSource == .url ? "the host of \(nameSource.setting)" : nameSource.setting
        return "the server's certificate must chain to \(trustText), be valid now and name '\(serverName)', \(nameText)"
    }
}
