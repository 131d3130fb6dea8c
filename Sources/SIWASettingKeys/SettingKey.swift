import SIWAFastCGI
import SIWARedis

/// The name of one row of the settings table with the type its row reads. A row is made
/// from its key (`.integer(.workers, ...)` only takes a `SettingKey<Int>`) and a group reads
/// it back with the same key (`try values[.workers]` is an `Int`), so a name is spelt once
/// and a row and its reader cannot disagree on the type.
public struct SettingKey<Value: Sendable>: Sendable {
    public let name: String

    package init(_ name: String) { self.name = name }
}

extension SettingKey where Value == Set<String> {
    public static var clientIDs: Self { Self("SIWA_CLIENT_IDS") }
}

extension SettingKey where Value == Set<String>? {
    public static var googleClientIDs: Self { Self("SIWA_GOOGLE_CLIENT_IDS") }
}

extension SettingKey where Value == String {
    public static var jwksURL: Self { Self("SIWA_JWKS_URL") }
    public static var jwksCache: Self { Self("SIWA_JWKS_CACHE") }
    public static var spoolDirectory: Self { Self("SIWA_SPOOL_DIR") }
    public static var keyPrefix: Self { Self("SIWA_KEY_PREFIX") }
    public static var notificationPath: Self { Self("SIWA_NOTIFICATION_PATH") }
    public static var googleConfigurationURL: Self { Self("SIWA_GOOGLE_RISC_CONFIGURATION_URL") }
    public static var googlePath: Self { Self("SIWA_GOOGLE_PATH") }
    public static var appleTokenURL: Self { Self("SIWA_APPLE_TOKEN_URL") }
    public static var appleRevokeURL: Self { Self("SIWA_APPLE_REVOKE_URL") }
    public static var appleMigrationURL: Self { Self("SIWA_APPLE_MIGRATION_URL") }
}

extension SettingKey where Value == String? {
    public static var jwksCAFile: Self { Self("SIWA_JWKS_CA_FILE") }
    public static var fastCGISocketGroup: Self { Self("SIWA_FCGI_SOCKET_GROUP") }
    public static var redisSentinelMaster: Self { Self("SIWA_REDIS_SENTINEL_MASTER") }
    public static var redisSentinelPassword: Self { Self("SIWA_REDIS_SENTINEL_PASSWORD") }
    public static var redisTLSCAFile: Self { Self("SIWA_REDIS_TLS_CA_FILE") }
    public static var redisTLSCertificateFile: Self { Self("SIWA_REDIS_TLS_CERT_FILE") }
    public static var redisTLSKeyFile: Self { Self("SIWA_REDIS_TLS_KEY_FILE") }
    public static var redisTLSServerName: Self { Self("SIWA_REDIS_TLS_SERVER_NAME") }
    public static var appleTeamID: Self { Self("SIWA_APPLE_TEAM_ID") }
    public static var appleKeyID: Self { Self("SIWA_APPLE_KEY_ID") }
    public static var applePrivateKeyFile: Self { Self("SIWA_APPLE_PRIVATE_KEY_FILE") }
    public static var appleCAFile: Self { Self("SIWA_APPLE_CA_FILE") }
}

extension SettingKey where Value == Duration {
    public static var jwksRefresh: Self { Self("SIWA_JWKS_REFRESH_SECONDS") }
    public static var jwksUnknownKeyIDRefresh: Self { Self("SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS") }
    public static var jwksTimeout: Self { Self("SIWA_JWKS_TIMEOUT_SECONDS") }
    public static var redisTimeout: Self { Self("SIWA_REDIS_TIMEOUT_MS") }
    public static var redisRetry: Self { Self("SIWA_REDIS_RETRY_MS") }
    public static var leeway: Self { Self("SIWA_LEEWAY_SECONDS") }
    public static var seenTTL: Self { Self("SIWA_SEEN_TTL_SECONDS") }
    public static var shutdownTimeout: Self { Self("SIWA_SHUTDOWN_TIMEOUT_SECONDS") }
    public static var retryAfter: Self { Self("SIWA_RETRY_AFTER_SECONDS") }
    public static var redisReplicaTimeout: Self { Self("SIWA_REDIS_REPLICA_TIMEOUT_MS") }
    public static var readySpoolMaximumAge: Self { Self("SIWA_READY_SPOOL_MAX_AGE_SECONDS") }
    public static var healthPingTimeout: Self { Self("SIWA_HEALTH_PING_TIMEOUT_MS") }
}

extension SettingKey where Value == RedisEndpoint {
    public static var redisURL: Self { Self("SIWA_REDIS_URL") }
}

extension SettingKey where Value == FastCGIListenAddress {
    public static var fastCGISocket: Self { Self("SIWA_FCGI_SOCKET") }
}

extension SettingKey where Value == UInt32 {
    public static var fastCGISocketMode: Self { Self("SIWA_FCGI_SOCKET_MODE") }
}

extension SettingKey where Value == Int {
    public static var workers: Self { Self("SIWA_WORKERS") }
    public static var maximumBodyBytes: Self { Self("SIWA_MAX_BODY_BYTES") }
    public static var streamMaximumLength: Self { Self("SIWA_STREAM_MAXLEN") }
    public static var fastCGIBacklog: Self { Self("SIWA_FCGI_BACKLOG") }
    public static var spoolRetentionDays: Self { Self("SIWA_SPOOL_RETENTION_DAYS") }
    public static var redisMinimumReplicas: Self { Self("SIWA_REDIS_MIN_REPLICAS") }
    public static var appleTimeout: Self { Self("SIWA_APPLE_TIMEOUT_SECONDS") }
    public static var appleAttempts: Self { Self("SIWA_APPLE_ATTEMPTS") }
    public static var appleRetryDelay: Self { Self("SIWA_APPLE_RETRY_DELAY_MS") }
    public static var silenceAlertHours: Self { Self("SIWA_SILENCE_ALERT_HOURS") }
    public static var readySpoolMaximumDepth: Self { Self("SIWA_READY_SPOOL_MAX_DEPTH") }
}

extension SettingKey where Value == [String: Int]? {
    public static var silenceAlertHoursByClient: Self { Self("SIWA_SILENCE_ALERT_HOURS_BY_CLIENT") }
}

extension SettingKey where Value == [RedisNodeAddress]? {
    public static var redisSentinels: Self { Self("SIWA_REDIS_SENTINELS") }
    public static var redisClusterNodes: Self { Self("SIWA_REDIS_CLUSTER_NODES") }
}

extension SettingKey where Value == Bool {
    public static var redisSentinelTLS: Self { Self("SIWA_REDIS_SENTINEL_TLS") }
}
