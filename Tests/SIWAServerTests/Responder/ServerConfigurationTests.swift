import Foundation
import SIWARedis
import Testing

@testable import SIWASettingKeys
@testable import SIWASettings

@Suite("Server configuration")
struct ServerConfigurationTests {
    static let minimal = ["SIWA_CLIENT_IDS": "com.example.app"]

    @Test("defaults, with only the required setting")
    func defaults() throws {
        let configuration = try ServerConfiguration(environment: Self.minimal)
        #expect(configuration.clientIDs == ["com.example.app"])
        #expect(configuration.jwks.provider.url == "https://appleid.apple.com/auth/keys")
        #expect(configuration.jwks.caFile == nil)
        #expect(configuration.jwks.provider.cacheFilePath == "/var/lib/siwa-endpoint/jwks.json")
        #expect(configuration.jwks.provider.refreshInterval == .seconds(3600))
        #expect(configuration.jwks.provider.unknownKeyIDRefreshInterval == .seconds(60))
        #expect(configuration.jwks.timeout == .seconds(5))
        #expect(configuration.redis.url == "redis://127.0.0.1:6379/0")
        #expect(configuration.redis.endpoint == RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 6379)))
        #expect(configuration.redis.timeout == .milliseconds(1000))
        #expect(configuration.fastCGI.socket == "/run/siwa-endpoint/fcgi.sock")
        #expect(configuration.fastCGI.server.address == .unixSocket(path: "/run/siwa-endpoint/fcgi.sock", mode: 0o660))
        #expect(configuration.fastCGI.server.workerCount == 2 * ProcessInfo.processInfo.activeProcessorCount)
        #expect(configuration.fastCGI.server.shutdownTimeout == .seconds(10))
        #expect(configuration.spool.directory == "/var/lib/siwa-endpoint/spool")
        #expect(configuration.store.keyPrefix == "siwa")
        #expect(configuration.store.seenMarkerTTL == .seconds(2_592_000))
        #expect(configuration.store.streamMaximumLength == 1_000_000)
        #expect(configuration.requests.notificationPath == "/apple/notifications")
        #expect(configuration.fastCGI.server.maximumBodyBytes == 65_536)
        #expect(configuration.requests.leeway == .seconds(60))
        #expect(configuration.requests.retryAfter == .seconds(30))
        #expect(configuration.unknownSettings == [])
    }

    @Test("the socket mode and group go into the listen address")
    func socketModeAndGroup() throws {
        var environment = Self.minimal
        environment["SIWA_FCGI_SOCKET_MODE"] = "0600"
        environment["SIWA_FCGI_SOCKET_GROUP"] = "www-data"
        let configuration = try ServerConfiguration(environment: environment)
        #expect(
            configuration.fastCGI.server.address
                == .unixSocket(path: "/run/siwa-endpoint/fcgi.sock", mode: 0o600, group: "www-data"))
    }

    @Test(
        "a bad value names its setting",
        arguments: [
            ("SIWA_CLIENT_IDS", ""), ("SIWA_CLIENT_IDS", "com.a,{bad}"), ("SIWA_CLIENT_IDS", "team:app"),
            ("SIWA_JWKS_URL", "http://keys.example.com/k"),
            ("SIWA_JWKS_URL", "ftp://localhost/k"),
            ("SIWA_JWKS_URL", "http://127.attacker.example/keys"), ("SIWA_JWKS_CA_FILE", "/nonexistent/ca.pem"),
            ("SIWA_JWKS_CACHE", "relative/path"), ("SIWA_JWKS_REFRESH_SECONDS", "10"),
            ("SIWA_REDIS_URL", "localhost:6379"), ("SIWA_FCGI_SOCKET", "0.0.0.0:9000"),
            ("SIWA_FCGI_SOCKET", "relative.sock"), ("SIWA_FCGI_SOCKET_MODE", "0999"), ("SIWA_KEY_PREFIX", "a b"),
            ("SIWA_NOTIFICATION_PATH", "/healthz"), ("SIWA_NOTIFICATION_PATH", "apple"), ("SIWA_WORKERS", "0"),
            ("SIWA_WORKERS", "many"), ("SIWA_MAX_BODY_BYTES", "10"), ("SIWA_SEEN_TTL_SECONDS", "-1"),
            // Values that --check once passed and serve then refused (issue: settings checked once).
            ("SIWA_REDIS_URL", "redis://"), ("SIWA_REDIS_URL", "redis://h:99999"),
            ("SIWA_REDIS_URL", "redis://127.0.0.1:6379/abc"), ("SIWA_REDIS_URL", "redis://:@127.0.0.1:6379/0"),
            ("SIWA_REDIS_URL", "redis://127.0.0.1:6379/0?db=1"), ("SIWA_FCGI_SOCKET", "127.1.2.300:9000"),
            ("SIWA_FCGI_SOCKET", "localhost:9000"), ("SIWA_JWKS_URL", "https://"),
        ])
    func badValue(_ name: String, _ value: String) {
        var environment = Self.minimal
        environment[name] = value
        #expect {
            try ServerConfiguration(environment: environment)
        } throws: { error in
            (error as? ConfigurationError)?.setting == name
        }
    }

    @Test("SIWA_CLIENT_IDS is required")
    func clientIDsRequired() {
        #expect {
            try ServerConfiguration(environment: [:])
        } throws: { error in
            (error as? ConfigurationError)?.setting == "SIWA_CLIENT_IDS"
        }
    }

    @Test("loopback forms are accepted where loopback is required")
    func loopback() throws {
        var environment = Self.minimal
        environment["SIWA_JWKS_URL"] = "http://127.0.0.1:8080/keys.json"
        environment["SIWA_FCGI_SOCKET"] = "127.0.0.1:9000"
        environment["SIWA_CLIENT_IDS"] = "com.example.app, com.example.watch"
        let configuration = try ServerConfiguration(environment: environment)
        #expect(configuration.fastCGI.socket == "127.0.0.1:9000")
        #expect(configuration.fastCGI.server.address == .loopbackTCP(host: "127.0.0.1", port: 9000))
        #expect(configuration.clientIDs == ["com.example.app", "com.example.watch"])
    }

    @Test("an env file is read; the environment wins; unknown SIWA_ names are reported")
    func envFile() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-env-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        try """
        # comment
        SIWA_CLIENT_IDS=com.example.app
        SIWA_WORKERS="7"
        SIWA_KEY_PREFIX=from-file
        SIWA_WROKERS=3
        """.write(to: file, atomically: true, encoding: .utf8)
        let configuration = try ServerConfiguration(environment: ["SIWA_KEY_PREFIX": "from-env"], envFile: file.path)
        #expect(configuration.fastCGI.server.workerCount == 7)
        #expect(configuration.store.keyPrefix == "from-env")
        #expect(configuration.unknownSettings == ["SIWA_WROKERS"])
        #expect {
            try ServerConfiguration(environment: [:], envFile: "/nonexistent/env")
        } throws: { error in
            (error as? ConfigurationError)?.setting == "--env-file"
        }
    }
}

@Suite("reconcile's settings")
struct ReconcileSettingsTests {
    @Test("serve knows the SIWA_APPLE_* settings: no unknown-setting warning for them")
    func serveKnowsAppleSettings() throws {
        let environment = Dictionary(
            uniqueKeysWithValues: [
                ("SIWA_APPLE_TEAM_ID", "ABCDE12345"), ("SIWA_APPLE_KEY_ID", "KEY1234567"),
                ("SIWA_APPLE_PRIVATE_KEY_FILE", "/etc/siwa-endpoint/AuthKey_KEY1234567.p8"),
                ("SIWA_APPLE_TOKEN_URL", "https://appleid.apple.com/auth/token"),
                ("SIWA_APPLE_REVOKE_URL", "https://appleid.apple.com/auth/revoke"),
                ("SIWA_APPLE_MIGRATION_URL", "https://appleid.apple.com/auth/usermigrationinfo"),
                ("SIWA_APPLE_CA_FILE", "/etc/ssl/certs/ca-certificates.crt"), ("SIWA_APPLE_TIMEOUT_SECONDS", "10"),
                ("SIWA_APPLE_ATTEMPTS", "3"), ("SIWA_APPLE_RETRY_DELAY_MS", "2000"),
                ("SIWA_CLIENT_IDS", "com.example.app"), ("SIWA_APPLE_TEM_ID", "x"),
            ])
        let configuration = try ServerConfiguration(environment: environment)
        #expect(configuration.unknownSettings == ["SIWA_APPLE_TEM_ID"])
        #expect(
            AppleAPIConfiguration.appleSettings.map(\.name) == [
                "SIWA_APPLE_TEAM_ID", "SIWA_APPLE_KEY_ID", "SIWA_APPLE_PRIVATE_KEY_FILE", "SIWA_APPLE_TOKEN_URL",
                "SIWA_APPLE_REVOKE_URL", "SIWA_APPLE_MIGRATION_URL", "SIWA_APPLE_CA_FILE", "SIWA_APPLE_TIMEOUT_SECONDS",
                "SIWA_APPLE_ATTEMPTS",
                "SIWA_APPLE_RETRY_DELAY_MS",
            ])
    }
}
