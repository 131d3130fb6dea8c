import Foundation
import SIWAFastCGI
import SIWAGoogleAPI
import SIWAHTTPS
import SIWARedis
import SIWASettingKeys
import SIWAVerification
import Testing

@testable import SIWAAppleAPI
@testable import SIWAKeys
@testable import SIWAResponder
@testable import SIWASettings
@testable import SIWASpool
@testable import SIWAStore

/// A setting's default and bounds live in the component that uses the value; the settings
/// table reads them from there. These tests compare the table with the components as a
/// caller who passes nothing gets them.
@Suite("Settings owned by their components")
struct SettingOwnershipTests {
    static let minimal = ["SIWA_CLIENT_IDS": "com.example.app"]
    static let address = FastCGIListenAddress.unixSocket(path: "/run/siwa-endpoint/fcgi.sock")

    static func tableDefault(_ name: String) throws -> String {
        let row = try #require(ServerConfiguration.settings.first { $0.name == name }, "\(name) is in the table")
        return try #require(row.defaultValue, "\(name) has a default")
    }

    @Test("the table's default of each setting a component owns is the component's own default")
    func tableDefaultsAreTheComponents() throws {
        let server = FastCGIServerConfiguration(address: Self.address)
        #expect(try Self.tableDefault("SIWA_FCGI_BACKLOG") == "\(server.backlog)")
        #expect(try Self.tableDefault("SIWA_MAX_BODY_BYTES") == "\(server.maximumBodyBytes)")
        #expect(
            try Self.tableDefault("SIWA_SHUTDOWN_TIMEOUT_SECONDS") == "\(Int(server.shutdownTimeout / .seconds(1)))")

        let connection = RedisConnection(endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 6379)))
        #expect(
            try Self.tableDefault("SIWA_REDIS_TIMEOUT_MS") == "\(Int(connection.commandTimeout / .milliseconds(1)))")
        #expect(
            try Self.tableDefault("SIWA_REDIS_TIMEOUT_MS") == "\(Int(connection.connectTimeout / .milliseconds(1)))")

        let store = NotificationStore(connection: connection)
        #expect(try Self.tableDefault("SIWA_KEY_PREFIX") == store.keys.prefix)
        #expect(try Self.tableDefault("SIWA_SEEN_TTL_SECONDS") == "\(Int(store.seenMarkerTTL / .seconds(1)))")
        #expect(try Self.tableDefault("SIWA_STREAM_MAXLEN") == "\(store.streamMaximumLength)")
        #expect(try Self.tableDefault("SIWA_REDIS_MIN_REPLICAS") == "\(store.minimumReplicas)")
        #expect(
            try Self.tableDefault("SIWA_REDIS_REPLICA_TIMEOUT_MS") == "\(Int(store.replicaTimeout / .milliseconds(1)))")
    }

    @Test("serve's FastCGI group read from no settings is the FastCGI server's default configuration")
    func unsetFastCGISettingsAreTheServersDefaults() throws {
        let configuration = try ServerConfiguration(environment: Self.minimal)
        #expect(
            configuration.fastCGI.server
                == FastCGIServerConfiguration(address: .unixSocket(path: "/run/siwa-endpoint/fcgi.sock", mode: 0o660)))
        #expect(configuration.redis.timeout == RedisConnection.defaultTimeout)
    }

    @Test(
        "a value the table accepts the FastCGI server accepts; the next one out is refused by the table, naming it",
        arguments: [
            ("SIWA_WORKERS", 1, 256), ("SIWA_MAX_BODY_BYTES", 1024, 131_072), ("SIWA_FCGI_BACKLOG", 16, 65_535),
        ])
    func tableBoundsAreTheServers(name: String, lowest: Int, highest: Int) throws {
        for value in [lowest, highest] {
            let configuration = try ServerConfiguration(environment: Self.minimal.merging([name: "\(value)"]) { $1 })
            #expect(throws: Never.self) { try configuration.fastCGI.server.validate() }
        }
        for value in [lowest - 1, highest + 1] {
            #expect {
                try ServerConfiguration(environment: Self.minimal.merging([name: "\(value)"]) { $1 })
            } throws: { error in
                (error as? ConfigurationError)?.setting == name
            }
        }
        // And the server refuses the same values on its own.
        var server = FastCGIServerConfiguration(address: Self.address)
        switch name {
        case "SIWA_WORKERS": server.workerCount = highest + 1
        case "SIWA_MAX_BODY_BYTES": server.maximumBodyBytes = highest + 1
        default: server.backlog = Int32(highest + 1)
        }
        #expect {
            try server.validate()
        } throws: { error in
            (error as? FastCGIError)?.code == .invalidSetting
        }
    }
}

extension SettingOwnershipTests {
    /// The store and connection a configuration read from `text` builds, as serve builds them.
    static func redisComponents(_ text: [String: String]) throws -> (RedisConnection, NotificationStore) {
        let configuration = try ServerConfiguration(environment: minimal.merging(text) { $1 })
        let connection = RedisConnection(
            endpoint: configuration.redis.endpoint, connectTimeout: configuration.redis.timeout,
            commandTimeout: configuration.redis.timeout)
        let store = NotificationStore(
            connection: connection, keyPrefix: configuration.store.keyPrefix,
            seenMarkerTTL: configuration.store.seenMarkerTTL,
            streamMaximumLength: configuration.store.streamMaximumLength,
            minimumReplicas: configuration.redis.minimumReplicas, replicaTimeout: configuration.redis.replicaTimeout)
        return (connection, store)
    }

    @Test(
        "a value the table accepts the Redis connection and the store accept; the next one out is refused by the table, naming it, and by the component",
        arguments: [
            ("SIWA_REDIS_TIMEOUT_MS", 10, 60_000), ("SIWA_SEEN_TTL_SECONDS", 60, 31_536_000),
            ("SIWA_STREAM_MAXLEN", 1000, 1_000_000_000), ("SIWA_REDIS_MIN_REPLICAS", 0, 16),
            ("SIWA_REDIS_REPLICA_TIMEOUT_MS", 1, 60_000),
        ])
    func tableBoundsAreTheRedisComponents(name: String, lowest: Int, highest: Int) throws {
        for value in [lowest, highest] {
            let (connection, store) = try Self.redisComponents([name: "\(value)"])
            #expect(throws: Never.self, "\(name)=\(value)") { try connection.validate() }
            #expect(throws: Never.self, "\(name)=\(value)") { try store.validate() }
        }
        for value in [lowest - 1, highest + 1] {
            #expect {
                try ServerConfiguration(environment: Self.minimal.merging([name: "\(value)"]) { $1 })
            } throws: { error in
                (error as? ConfigurationError)?.setting == name
            }
        }
        // And the component refuses the values just outside on its own.
        let endpoint = RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 6379))
        for value in [lowest - 1, highest + 1] {
            let refused: () throws(RedisError) -> Void =
                switch name {
                case "SIWA_REDIS_TIMEOUT_MS":
                    RedisConnection(endpoint: endpoint, commandTimeout: .milliseconds(value)).validate
                case "SIWA_SEEN_TTL_SECONDS":
                    NotificationStore(connection: RedisConnection(endpoint: endpoint), seenMarkerTTL: .seconds(value))
                        .validate
                case "SIWA_STREAM_MAXLEN":
                    NotificationStore(connection: RedisConnection(endpoint: endpoint), streamMaximumLength: value)
                        .validate
                case "SIWA_REDIS_MIN_REPLICAS":
                    NotificationStore(connection: RedisConnection(endpoint: endpoint), minimumReplicas: value)
                        .validate
                default:
                    NotificationStore(
                        connection: RedisConnection(endpoint: endpoint), replicaTimeout: .milliseconds(value)
                    ).validate
                }
            #expect("\(name)=\(value)") {
                try refused()
            } throws: { error in
                (error as? RedisError)?.code == .invalidSetting
            }
        }
    }
}

/// Rows are made from typed keys and read back with them: a name is spelt once.
@Suite("Typed setting keys")
struct SettingKeyTests {
    @Test("a key reads its row's type; a key outside the table read at start is read from the one table, or refused")
    func keysReadTheirRows() throws {
        let values = try SettingValues(table: [], text: ["SIWA_WORKERS": "7", "SIWA_REDIS_SENTINEL_TLS": "yes"])
        let workers: Int = try values[.workers]
        #expect(workers == 7)
        let sentinelsUseTLS: Bool = try values[.redisSentinelTLS]
        #expect(sentinelsUseTLS)
        let prefix: String = try values[.keyPrefix]
        #expect(prefix == NotificationStore.defaultKeyPrefix)
        let bad = try SettingValues(table: [], text: ["SIWA_WORKERS": "0"])
        #expect {
            _ = try bad[.workers]
        } throws: { error in
            (error as? ConfigurationError)?.setting == "SIWA_WORKERS"
        }
        #expect(
            Set(ServerConfiguration.settings.map(\.name)).count == ServerConfiguration.settings.count,
            "one row per name")
    }
}

/// Every row of the table: owned by a component (its default and bounds read from there,
/// compared here with the component's own), or the table's own, with the reason.
@Suite("Every setting's default and bounds have one owner")
struct SettingOwnerTableTests {
    /// A row a component owns: the default it shows (nil: computed at start, compared as
    /// read), and its bounds in the table's unit (nil: the value is parsed, not counted).
    struct Owned: Sendable {
        let defaultText: String?
        let bounds: ClosedRange<Int>?
    }

    static func seconds(_ duration: Duration) -> Int { Int(duration / .seconds(1)) }
    static func milliseconds(_ duration: Duration) -> Int { Int(duration / .milliseconds(1)) }
    static func seconds(_ range: ClosedRange<Duration>) -> ClosedRange<Int> {
        seconds(range.lowerBound)...seconds(range.upperBound)
    }
    static func milliseconds(_ range: ClosedRange<Duration>) -> ClosedRange<Int> {
        milliseconds(range.lowerBound)...milliseconds(range.upperBound)
    }

    static let owned: [String: Owned] = [
        "SIWA_READY_SPOOL_MAX_DEPTH": Owned(
            defaultText: "\(ReadinessLimits.defaultSpoolMaximumDepth)", bounds: ReadinessLimits.spoolMaximumDepthRange),
        "SIWA_READY_SPOOL_MAX_AGE_SECONDS": Owned(
            defaultText: "\(seconds(ReadinessLimits.defaultSpoolMaximumAge))",
            bounds: seconds(ReadinessLimits.spoolMaximumAgeRange)),
        "SIWA_HEALTH_PING_TIMEOUT_MS": Owned(
            defaultText: "\(milliseconds(ReadinessLimits.defaultHealthPingTimeout))",
            bounds: milliseconds(ReadinessLimits.healthPingTimeoutRange)),
        "SIWA_WEBHOOK_CONNECT_TIMEOUT_MS": Owned(
            defaultText: "\(milliseconds(WebhookConfiguration.defaultConnectTimeout))",
            bounds: milliseconds(WebhookConfiguration.connectTimeoutRange)),
        "SIWA_WEBHOOK_TIMEOUT_MS": Owned(
            defaultText: "\(milliseconds(WebhookConfiguration.defaultTimeout))",
            bounds: milliseconds(WebhookConfiguration.timeoutRange)),
        "SIWA_WEBHOOK_KEEPALIVE_MS": Owned(
            defaultText: "\(milliseconds(WebhookConfiguration.defaultKeepAlive))",
            bounds: milliseconds(WebhookConfiguration.keepAliveRange)),
        "SIWA_WEBHOOK_CLAIM_IDLE_MS": Owned(
            defaultText: "\(milliseconds(WebhookConfiguration.defaultClaimIdle))",
            bounds: milliseconds(WebhookConfiguration.claimIdleRange)),
        "SIWA_WEBHOOK_DESTINATIONS": Owned(defaultText: WebhookConfiguration.defaultDestinationsPath, bounds: nil),
        "SIWA_WEBHOOK_METRICS_LISTEN": Owned(defaultText: WebhookConfiguration.defaultMetricsListen, bounds: nil),
        "SIWA_JWKS_URL": Owned(defaultText: JWKSProvider.Settings.appleKeysURL, bounds: nil),
        "SIWA_JWKS_REFRESH_SECONDS": Owned(
            defaultText: "\(seconds(JWKSProvider.Settings.defaultRefreshInterval))",
            bounds: seconds(JWKSProvider.Settings.refreshIntervalRange)),
        "SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": Owned(
            defaultText: "\(seconds(JWKSProvider.Settings.defaultUnknownKeyIDRefreshInterval))",
            bounds: seconds(JWKSProvider.Settings.unknownKeyIDRefreshIntervalRange)),
        "SIWA_JWKS_TIMEOUT_SECONDS": Owned(
            defaultText: "\(Int(HTTPSFetcher.defaultTimeoutSeconds))",
            bounds: seconds(JWKSProvider.Settings.fetchTimeoutRange)),
        "SIWA_REDIS_TIMEOUT_MS": Owned(
            defaultText: "\(milliseconds(RedisConnection.defaultTimeout))",
            bounds: milliseconds(RedisConnection.timeoutRange)),
        "SIWA_REDIS_RETRY_MS": Owned(
            defaultText: "\(milliseconds(RedisCircuitBreaker.defaultRetryInterval))",
            bounds: milliseconds(RedisCircuitBreaker.retryIntervalRange)),
        "SIWA_KEY_PREFIX": Owned(defaultText: NotificationStore.defaultKeyPrefix, bounds: nil),
        "SIWA_WORKERS": Owned(defaultText: nil, bounds: FastCGIServerConfiguration.workerCountRange),
        "SIWA_MAX_BODY_BYTES": Owned(
            defaultText: "\(FastCGIServerConfiguration.defaultMaximumBodyBytes)",
            bounds: FastCGIServerConfiguration.maximumBodyBytesRange),
        "SIWA_FCGI_BACKLOG": Owned(
            defaultText: "\(FastCGIServerConfiguration.defaultBacklog)", bounds: FastCGIServerConfiguration.backlogRange
        ),
        "SIWA_SHUTDOWN_TIMEOUT_SECONDS": Owned(
            defaultText: "\(seconds(FastCGIServerConfiguration.defaultShutdownTimeout))",
            bounds: seconds(FastCGIServerConfiguration.shutdownTimeoutRange)),
        "SIWA_LEEWAY_SECONDS": Owned(
            defaultText: "\(NotificationVerifier.defaultLeewaySeconds)",
            bounds: Int(
                NotificationVerifier.leewaySecondsRange.lowerBound)...Int(
                    NotificationVerifier.leewaySecondsRange.upperBound)),
        "SIWA_SEEN_TTL_SECONDS": Owned(
            defaultText: "\(seconds(NotificationStore.defaultSeenMarkerTTL))",
            bounds: seconds(NotificationStore.seenMarkerTTLRange)),
        "SIWA_STREAM_MAXLEN": Owned(
            defaultText: "\(NotificationStore.defaultStreamMaximumLength)",
            bounds: NotificationStore.streamMaximumLengthRange),
        "SIWA_REDIS_MIN_REPLICAS": Owned(
            defaultText: "\(NotificationStore.defaultMinimumReplicas)", bounds: NotificationStore.minimumReplicasRange),
        "SIWA_REDIS_REPLICA_TIMEOUT_MS": Owned(
            defaultText: "\(milliseconds(NotificationStore.defaultReplicaTimeout))",
            bounds: milliseconds(NotificationStore.replicaTimeoutRange)),
        "SIWA_RETRY_AFTER_SECONDS": Owned(
            defaultText: "\(seconds(NotificationResponder.defaultRetryAfter))",
            bounds: seconds(NotificationResponder.retryAfterRange)),
        "SIWA_SPOOL_RETENTION_DAYS": Owned(
            defaultText: "\(SpoolReplayer.defaultRetentionDays)", bounds: SpoolReplayer.retentionDaysRange),
        "SIWA_SILENCE_ALERT_HOURS": Owned(
            defaultText: "\(SilenceSettings.defaultAlertHours)", bounds: SilenceSettings.alertHoursRange),
        "SIWA_APPLE_TOKEN_URL": Owned(defaultText: AppleAPIConfiguration.defaultTokenURL, bounds: nil),
        "SIWA_APPLE_REVOKE_URL": Owned(defaultText: AppleTokenRevocation.defaultRevokeURL, bounds: nil),
        "SIWA_APPLE_MIGRATION_URL": Owned(defaultText: AppleUserMigration.defaultMigrationURL, bounds: nil),
        "SIWA_APPLE_TIMEOUT_SECONDS": Owned(
            defaultText: "\(AppleSignedPost.defaultTimeoutSeconds)", bounds: AppleSignedPost.timeoutSecondsRange),
        "SIWA_APPLE_ATTEMPTS": Owned(
            defaultText: "\(AppleSignedPost.defaultAttempts)", bounds: AppleSignedPost.attemptsRange),
        "SIWA_APPLE_RETRY_DELAY_MS": Owned(
            defaultText: "\(AppleSignedPost.defaultRetryDelayMilliseconds)",
            bounds: AppleSignedPost.retryDelayMillisecondsRange),
        "SIWA_GOOGLE_RISC_API_URL": Owned(defaultText: GoogleManagementClient.defaultAPIURL, bounds: nil),
        "SIWA_GOOGLE_RISC_CONFIGURATION_URL": Owned(
            defaultText: SecurityEventVerifier.googleConfigurationURL, bounds: nil),
        "SIWA_GOOGLE_PATH": Owned(defaultText: GoogleSettings.defaultPath, bounds: nil),
    ]

    /// The rows no component has a default for, and why.
    static let tableOwn: [String: String] = [
        "SIWA_WEBHOOK_CONSUMER": "unset: the host name and the process ID",
        "SIWA_WEBHOOK_RETRY_SCALE": "for tests only: 1, the documented schedule",
        "SIWA_CLIENT_IDS": "required",
        "SIWA_JWKS_CA_FILE": "unset: the system trust store",
        "SIWA_JWKS_CACHE": "the package's file layout",
        "SIWA_REDIS_URL": "the deployment's Redis, on this host by default",
        "SIWA_FCGI_SOCKET": "the package's file layout",
        "SIWA_FCGI_SOCKET_MODE": "the package's socket, which nginx's group reaches",
        "SIWA_FCGI_SOCKET_GROUP": "unset: the process group",
        "SIWA_SPOOL_DIR": "the package's file layout",
        "SIWA_NOTIFICATION_PATH": "the site's path, the nginx site's too",
        "SIWA_REDIS_SENTINELS": "unset: no Sentinel",
        "SIWA_REDIS_SENTINEL_MASTER": "unset: no Sentinel",
        "SIWA_REDIS_SENTINEL_PASSWORD": "unset: no password",
        "SIWA_REDIS_SENTINEL_TLS": "no: plain TCP to the sentinels",
        "SIWA_REDIS_CLUSTER_NODES": "unset: no cluster",
        "SIWA_REDIS_TLS_CA_FILE": "unset: the system trust store",
        "SIWA_REDIS_TLS_CERT_FILE": "unset: no client certificate",
        "SIWA_REDIS_TLS_KEY_FILE": "unset: no client certificate",
        "SIWA_REDIS_TLS_SERVER_NAME": "unset: the host connected to",
        "SIWA_SILENCE_ALERT_HOURS_BY_CLIENT": "unset: no client ID's own",
        "SIWA_APPLE_TEAM_ID": "required by reconcile",
        "SIWA_APPLE_KEY_ID": "required by reconcile",
        "SIWA_APPLE_PRIVATE_KEY_FILE": "required by reconcile",
        "SIWA_APPLE_CA_FILE": "unset: the system trust store",
        "SIWA_GOOGLE_SERVICE_ACCOUNT_FILE": "required by google",
        "SIWA_GOOGLE_RECEIVER_URL": "required by google register: the deployment's public URL",
        "SIWA_GOOGLE_CA_FILE": "unset: the system trust store",
        "SIWA_GOOGLE_CLIENT_IDS": "unset: Google not served (its path answers 404)",
    ]

    static let minimal = ["SIWA_CLIENT_IDS": "com.example.app"]

    @Test("every row is listed once: owned by a component, or the table's own")
    func everyRowHasAnOwner() {
        let names = Set(ServerConfiguration.settings.map(\.name))
        #expect(Set(Self.owned.keys).isDisjoint(with: Self.tableOwn.keys))
        #expect(names == Set(Self.owned.keys).union(Self.tableOwn.keys))
        #expect(names.subtracting(Self.owned.keys).subtracting(Self.tableOwn.keys).sorted() == [])
    }

    @Test(
        "an owned row's default is its component's, and its bounds are the component's: accepted at each end, refused just outside, naming the row"
    )
    func ownedRowsReadTheirComponent() throws {
        for (name, owner) in Self.owned.sorted(by: { $0.key < $1.key }) {
            let row = try #require(ServerConfiguration.settings.first { $0.name == name })
            if let defaultText = owner.defaultText {
                #expect(row.defaultValue == defaultText, "\(name)")
            } else {
                #expect(!row.isLiteralDefault, "\(name) shows a computed default")
            }
            guard let bounds = owner.bounds else { continue }
            for value in [bounds.lowerBound, bounds.upperBound] {
                #expect(throws: Never.self, "\(name)=\(value)") { try row.read("\(value)") }
            }
            for value in [bounds.lowerBound - 1, bounds.upperBound + 1] {
                #expect("\(name)=\(value)") {
                    try ServerConfiguration(environment: Self.minimal.merging([name: "\(value)"]) { $1 })
                } throws: { error in
                    (error as? ConfigurationError)?.setting == name
                }
            }
        }
    }

    @Test("serve's JWKS provider gets its settings as read, and a lone worker never waits for an unknown kid's fetch")
    func jwksProviderSettingsAsRead() throws {
        let unset = try ServerConfiguration(environment: Self.minimal.merging(["SIWA_WORKERS": "4"]) { $1 })
        #expect(
            unset.jwks.provider
                == JWKSProvider.Settings(
                    cacheFilePath: "/var/lib/siwa-endpoint/jwks.json", unknownKeyIDWaiters: 1))
        let lone = try ServerConfiguration(environment: Self.minimal.merging(["SIWA_WORKERS": "1"]) { $1 })
        #expect(lone.jwks.provider.unknownKeyIDWaiters == 0)
        #expect(lone.jwks.fetcher.timeoutSeconds == HTTPSFetcher.defaultTimeoutSeconds)
    }
}
