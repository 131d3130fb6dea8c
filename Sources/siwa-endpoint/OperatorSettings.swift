import Foundation
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWATelemetry

/// Settings a command reads the way serve reads its own: `SIWA_*` from the environment and
/// `--env-file` (the environment wins), each value by its row of the one table.
protocol CommandSettingsSource {
    init(environment: [String: String], envFile: String?) throws(ConfigurationError)
    /// `SIWA_*` names that are in no row of the table (misspelt?).
    var unknownSettings: [String] { get }
}

/// Serve's own settings (`serve`; `user` and `deletions`, for its Redis and key prefix).
extension ServerConfiguration: CommandSettingsSource {}
/// Single settings of serve's table, read one at a time (`status`, `spool`).
extension CommandSettings: CommandSettingsSource {}
/// The Apple commands' (`reconcile`, `revoke`, `canary`, `transfer`).
extension AppleAPIConfiguration: CommandSettingsSource {}
/// The deliverer's (`deliver` and its operator commands).
extension WebhookConfiguration: CommandSettingsSource {
    init(environment: [String: String], envFile: String?) throws(ConfigurationError) {
        try self.init(environment: environment, envFile: envFile, readKeys: true)
    }
}

/// The one entry point through which every command reads its settings: the same sources,
/// the same refusal (one `configuration_invalid` line naming the setting, by serve's one
/// writer, and exit 2), the same warning for an unknown `SIWA_*` name.
enum OperatorSettings {
    /// The settings of type `Settings`, or nil after the refusal line (the caller exits
    /// `ExitStatus.usage`). `clientIDStandIn`: a command that does not use
    /// `SIWA_CLIENT_IDS`, which serve requires, names a client ID to stand in for it when an
    /// operator's shell lacks it.
    static func load<Settings: CommandSettingsSource>(
        _ type: Settings.Type, envFile: String?, clientIDStandIn: String? = nil
    ) -> Settings? {
        let environment = ProcessInfo.processInfo.environment
        do throws(ConfigurationError) {
            let settings: Settings
            do {
                settings = try Settings(environment: environment, envFile: envFile)
            } catch  where error.setting == SettingKey.clientIDs.name && environment[error.setting] == nil {
                guard let clientIDStandIn else { throw error }
                settings = try Settings(
                    environment: environment.merging([error.setting: clientIDStandIn]) { current, _ in current },
                    envFile: envFile)
            }
            warnUnknown(settings.unknownSettings)
            return settings
        } catch {
            ServeCommand.refuse(error)
            return nil
        }
    }

    /// Warns, one `unknown_setting` line each, about `SIWA_*` names in no row of the table
    /// (misspelt?): every command that reads settings warns the same way, as serve does.
    static func warnUnknown(_ names: [String]) {
        for name in names {
            EventLog.event("unknown_setting", level: "warning", [("setting", .string(name))])
        }
    }

    /// A connection to serve's Redis, with serve's timeouts, found as serve finds it: the
    /// one entry point of every command that talks to serve's Redis.
    static func redisConnection(_ redis: RedisSettings, keyPrefix: String) -> RedisConnection {
        redis.connection(redis.locator(keyPrefix: keyPrefix))
    }
}
