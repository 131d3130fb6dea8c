import Foundation
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWATelemetry

/// Serve's settings, read the way `serve` reads them, for the operator commands (`user`).
enum OperatorSettings {
    /// Warns, one `unknown_setting` line each, about `SIWA_*` names in no row of the table
    /// (misspelt?): every command that reads settings warns the same way, as serve does.
    static func warnUnknown(_ names: [String]) {
        for name in names {
            EventLog.event("unknown_setting", level: "warning", [("setting", .string(name))])
        }
    }

    /// `SIWA_*` from the environment and `--env-file` (the environment wins), checked as
    /// `serve --check` checks them. An operator's shell may lack `SIWA_CLIENT_IDS`, which
    /// these commands do not use: the client ID asked about stands in for it then.
    static func load(_ envFile: String?, clientID: String) throws(ConfigurationError) -> ServerConfiguration {
        let environment = ProcessInfo.processInfo.environment
        let configuration: ServerConfiguration
        do {
            configuration = try ServerConfiguration(environment: environment, envFile: envFile)
        } catch  where error.setting == "SIWA_CLIENT_IDS" && environment["SIWA_CLIENT_IDS"] == nil {
            configuration = try ServerConfiguration(
                environment: environment.merging(["SIWA_CLIENT_IDS": clientID]) { current, _ in current },
                envFile: envFile)
        }
        warnUnknown(configuration.unknownSettings)
        return configuration
    }

    /// A connection to serve's Redis, with serve's timeouts, found as serve finds it: the
    /// one entry point of every command that talks to serve's Redis.
    static func redisConnection(_ redis: RedisSettings, keyPrefix: String) -> RedisConnection {
        redis.connection(redis.locator(keyPrefix: keyPrefix))
    }
}
