import Foundation

/// Reads and checks `SIWA_*` values; every failure names its setting. Shared by the
/// configurations of `serve` and `reconcile`, so one value means the same in both.
struct SettingReader {
    let values: [String: String]

    /// The `SIWA_*` values of `environment`, after the lines of `envFile` (`NAME=value`,
    /// `#` comments, optional quotes); the process environment wins over the file.
    static func values(environment: [String: String], envFile: String?) throws(ConfigurationError) -> [String: String] {
        var values: [String: String] = [:]
        if let envFile {
            guard let text = try? String(contentsOfFile: envFile, encoding: .utf8) else {
                throw ConfigurationError(setting: "--env-file", "cannot read \(envFile)")
            }
            for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let line = rawLine.trimmingCharacters(in: .whitespaces)
                if line.isEmpty || line.hasPrefix("#") { continue }
                guard let equals = line.firstIndex(of: "="), equals != line.startIndex else {
                    throw ConfigurationError(
                        setting: "--env-file", "line \(number + 1) of \(envFile) is not NAME=value")
                }
                var value = String(line[line.index(after: equals)...])
                if value.count >= 2, value.first == value.last, value.first == "\"" || value.first == "'" {
                    value = String(value.dropFirst().dropLast())
                }
                values[String(line[..<equals])] = value
            }
        }
        for (name, value) in environment where name.hasPrefix("SIWA_") { values[name] = value }
        return values
    }

    func integer(_ name: String, default value: Int, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        guard let text = values[name] else { return value }
        guard let number = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(number) else {
            throw ConfigurationError(
                setting: name, "must be a whole number from \(range.lowerBound) to \(range.upperBound), got \"\(text)\""
            )
        }
        return number
    }

    func path(_ name: String, default value: String) throws(ConfigurationError) -> String {
        let path = values[name] ?? value
        guard path.hasPrefix("/") else { throw ConfigurationError(setting: name, "must be an absolute path") }
        return path
    }

    /// An optional file that must be readable now (a CA bundle).
    func readableFile(_ name: String) throws(ConfigurationError) -> String? {
        guard let path = values[name] else { return nil }
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw ConfigurationError(setting: name, "cannot read \(path)")
        }
        return path
    }

    /// An https URL; plain http only to a loopback host.
    func httpsURL(_ name: String, default value: String) throws(ConfigurationError) -> String {
        let text = values[name] ?? value
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty,
            scheme == "https" || (scheme == "http" && HTTPSFetcher.isLoopbackHost(host))
        else {
            throw ConfigurationError(setting: name, "must be an https URL (http only to a loopback host)")
        }
        return text
    }

    /// `SIWA_REDIS_URL`.
    func redisURL() throws(ConfigurationError) -> String {
        let url = values["SIWA_REDIS_URL"] ?? "redis://127.0.0.1:6379/0"
        guard url.hasPrefix("redis://") || url.hasPrefix("unix:///") else {
            throw ConfigurationError(setting: "SIWA_REDIS_URL", "must be redis://host:port/db or unix:///path")
        }
        return url
    }

    /// `SIWA_KEY_PREFIX`.
    func keyPrefix() throws(ConfigurationError) -> String {
        let prefix = values["SIWA_KEY_PREFIX"] ?? "siwa"
        guard !prefix.isEmpty, prefix.count <= 64,
            prefix.unicodeScalars.allSatisfy({
                CharacterSet.alphanumerics.contains($0) || "-_.:".unicodeScalars.contains($0)
            })
        else {
            throw ConfigurationError(
                setting: "SIWA_KEY_PREFIX", "must be 1 to 64 letters, digits, '-', '_', '.' or ':'")
        }
        return prefix
    }
}
