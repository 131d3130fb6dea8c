import Foundation
import SIWASettingKeys

/// One row of the settings table: the name, the default as docs/settings.md, `deploy/env.example`
/// and `serve --help` show it (nil when the setting is required), what it means, and how
/// its text is read into a typed value. Adding a setting is adding a key (`SettingKey`), one
/// row made from it to `ServerConfiguration.settings`, with its default read from the
/// component that uses the value, and reading the value with the key into that group.
public struct Setting: Sendable {
    public let name: String
    /// The documented default; nil when the setting is required.
    public let defaultValue: String?
    public let meaning: String
    /// True when `defaultValue` is the value itself (`3600`), false when it describes one
    /// ("2 per core", "(system trust store)") or the setting is required.
    public let isLiteralDefault: Bool
    /// Reads the text (nil when unset) into the typed value; a problem names no setting,
    /// the caller adds the name.
    let read: @Sendable (String?) throws(SettingProblem) -> any Sendable

    init(
        _ name: String, _ defaultValue: String?, _ meaning: String, isLiteralDefault: Bool? = nil,
        read: @escaping @Sendable (String?) throws(SettingProblem) -> any Sendable
    ) {
        self.name = name
        self.defaultValue = defaultValue
        self.meaning = meaning
        self.isLiteralDefault = isLiteralDefault ?? (defaultValue.map { !$0.hasPrefix("(") } ?? false)
        self.read = read
    }

    /// A free-text setting; unset gives `defaultValue` (nil: required). The value is a `String`
    /// (or `String?` when `defaultValue` is shown in parentheses, i.e. "unset").
    public static func text(_ name: String, _ defaultValue: String?, _ meaning: String) -> Setting {
        if let defaultValue, defaultValue.hasPrefix("(") {
            return Setting(name, defaultValue, meaning) { text throws(SettingProblem) -> any Sendable in
                text.flatMap { $0.isEmpty ? nil : $0 } as String?
            }
        }
        return Setting(name, defaultValue, meaning) { text throws(SettingProblem) -> any Sendable in
            guard let value = text ?? defaultValue else { throw SettingProblem("is required") }
            return value
        }
    }

    /// A whole number within `range`; unset gives `defaultValue`.
    static func integer(
        _ key: SettingKey<Int>, default defaultValue: Int, in range: ClosedRange<Int>, _ meaning: String
    ) -> Setting {
        Setting(key.name, "\(defaultValue)", meaning) { text throws(SettingProblem) -> any Sendable in
            try text.map { text throws(SettingProblem) in try wholeNumber(text, in: range) } ?? defaultValue
        }
    }

    /// A whole number within `range` whose default is computed at start (e.g. "2 per core").
    static func integer(
        _ key: SettingKey<Int>, shown: String, default defaultValue: @escaping @Sendable () -> Int,
        in range: ClosedRange<Int>, _ meaning: String
    ) -> Setting {
        Setting(key.name, shown, meaning, isLiteralDefault: false) { text throws(SettingProblem) -> any Sendable in
            guard let text else { return defaultValue() }
            return try wholeNumber(text, in: range)
        }
    }

    /// A time within `range`, written in whole `unit`s; the default and the bounds are the
    /// component's own, shown in the unit.
    static func duration(
        _ key: SettingKey<Duration>, default defaultValue: Duration, in range: ClosedRange<Duration>,
        unit: DurationUnit, _ meaning: String
    ) -> Setting {
        let bounds = unit.count(range.lowerBound)...unit.count(range.upperBound)
        return Setting(key.name, "\(unit.count(defaultValue))", meaning) {
            text throws(SettingProblem) -> any Sendable in
            guard let text else { return defaultValue }
            return unit.duration(try wholeNumber(text, in: bounds))
        }
    }

    enum DurationUnit {
        case seconds, milliseconds

        /// `duration` in whole units.
        func count(_ duration: Duration) -> Int {
            Int(duration / (self == .seconds ? .seconds(1) : .milliseconds(1)))
        }

        func duration(_ count: Int) -> Duration { self == .seconds ? .seconds(count) : .milliseconds(count) }
    }

    /// An absolute path.
    static func path(_ key: SettingKey<String>, default defaultValue: String, _ meaning: String) -> Setting {
        parsed(key, default: defaultValue, meaning) { text throws(SettingProblem) in
            guard text.hasPrefix("/"), !text.contains("\0") else { throw SettingProblem("must be an absolute path") }
            return text
        }
    }

    /// Any value read by `parse`; unset reads `defaultValue` through the same parser
    /// (nil: required).
    static func parsed<Value: Sendable>(
        _ key: SettingKey<Value>, default defaultValue: String?, _ meaning: String,
        _ parse: @escaping @Sendable (String) throws(SettingProblem) -> Value
    ) -> Setting {
        Setting(key.name, defaultValue, meaning) { text throws(SettingProblem) -> any Sendable in
            guard let value = text ?? defaultValue else { throw SettingProblem("is required") }
            return try parse(value)
        }
    }

    /// A value that may be unset (`shown` says what unset means), read by `parse` when set.
    static func optional<Value: Sendable>(
        _ key: SettingKey<Value?>, shown: String, _ meaning: String,
        _ parse: @escaping @Sendable (String) throws(SettingProblem) -> Value
    ) -> Setting {
        Setting(key.name, shown, meaning, isLiteralDefault: false) { text throws(SettingProblem) -> any Sendable in
            guard let text, !text.isEmpty else { return Value?.none as any Sendable }
            return try parse(text) as Value?
        }
    }

    static func wholeNumber(_ text: String, in range: ClosedRange<Int>) throws(SettingProblem) -> Int {
        guard let number = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(number) else {
            throw SettingProblem(
                "must be a whole number from \(range.lowerBound) to \(range.upperBound), got \"\(text)\"")
        }
        return number
    }
}

/// What is wrong with one setting's value (the setting's name is added by the reader).
struct SettingProblem: Error {
    let text: String
    init(_ text: String) { self.text = text }
}

/// The typed values of every row, read once.
struct SettingValues {
    private let values: [String: any Sendable]
    private let text: [String: String]

    /// Reads every row of `table` from `text`, in table order; the first bad value throws.
    init(table: [Setting], text: [String: String]) throws(ConfigurationError) {
        var values: [String: any Sendable] = [:]
        for setting in table {
            values[setting.name] = try Self.read(setting, from: text)
        }
        self.values = values
        self.text = text
    }

    private static func read(_ setting: Setting, from text: [String: String]) throws(ConfigurationError)
        -> any Sendable
    {
        do throws(SettingProblem) {
            return try setting.read(text[setting.name])
        } catch {
            throw ConfigurationError(setting: setting.name, error.text)
        }
    }

    /// The value of `key`, of the type its row reads (the row was made from the same key). A
    /// key whose row is not in the table read at start (a command reads only its rows) is
    /// read now, from the one table, and refused the same way when its value is bad.
    subscript<Value>(_ key: SettingKey<Value>) -> Value {
        get throws(ConfigurationError) {
            if let value = values[key.name] as? Value { return value }
            guard let row = Setting.table.first(where: { $0.name == key.name }),
                let value = try Self.read(row, from: text) as? Value
            else {
                throw ConfigurationError(setting: key.name, "is not a setting of this program")
            }
            return value
        }
    }
}

extension Setting {
    /// Every row of every command (serve's table holds reconcile's rows too).
    static var table: [Setting] { ServerConfiguration.settings }
}
