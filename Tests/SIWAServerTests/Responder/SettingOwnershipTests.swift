import Foundation
import SIWAFastCGI
import SIWARedis
import Testing

@testable import SIWAServer

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
