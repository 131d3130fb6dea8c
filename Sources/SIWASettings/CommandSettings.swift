import Foundation
import SIWASettingKeys

/// Serve's settings as an operator command (`status`, `spool`, `user`) reads them: the same
/// `SIWA_*` environment variables and `--env-file` (the environment wins), each value read
/// by its row of the one table, so a value means the same in every command and a bad one
/// is refused naming its setting. A command reads only the settings it uses: a setting
/// serve requires (`SIWA_CLIENT_IDS`) is not asked of a command that has no use for it.
public struct CommandSettings {
    /// `SIWA_*` names that are in no row of the table (misspelt?).
    public let unknownSettings: [String]
    private let values: SettingValues
    private let text: [String: String]

    public init(environment: [String: String], envFile: String?) throws(ConfigurationError) {
        text = try ServerConfiguration.settingText(environment: environment, envFile: envFile)
        unknownSettings = ServerConfiguration.unknownNames(in: text)
        values = try SettingValues(table: [], text: text)
    }

    /// The value of `key` (its default when unset); a bad value throws, naming the setting.
    public subscript<Value>(_ key: SettingKey<Value>) -> Value {
        get throws(ConfigurationError) { try values[key] }
    }

    /// The setting's text as given, else its documented default (for a command to show).
    public func text<Value>(of key: SettingKey<Value>) -> String {
        ServerConfiguration.text(of: key, in: text)
    }
}
