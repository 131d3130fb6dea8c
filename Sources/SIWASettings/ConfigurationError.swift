import SIWASettingKeys

/// A setting that cannot be used; the message names it.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public let setting: String
    public let problem: String

    public init(setting: String, _ problem: String) {
        self.setting = setting
        self.problem = problem
    }

    /// A refusal of the setting `key` names.
    public init<Value>(_ key: SettingKey<Value>, _ problem: String) {
        self.init(setting: key.name, problem)
    }

    public var description: String { "\(setting) \(problem)" }
}
