import Foundation
import SIWASettings
import Testing

/// The settings table of docs/settings.md and `deploy/env.example` say what the settings table in
/// `ServerConfiguration.settings` says: the same names, the same defaults.
@Suite("Settings documentation agrees with the settings table")
struct SettingsDocumentationTests {
    static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The default cell of docs/settings.md as the table would render it.
    static func readmeDefault(_ setting: Setting) -> String {
        guard let value = setting.defaultValue else { return "**required**" }
        return setting.isLiteralDefault ? "`\(value)`" : value
    }

    @Test("the settings table of docs/settings.md: one row per setting, with its default")
    func readme() throws {
        let text = try String(
            contentsOf: Self.repository.appendingPathComponent("docs/settings.md"), encoding: .utf8)
        var rows: [String: String] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("| `SIWA_") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false)
                .map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 4 else { continue }
            let name = cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            #expect(rows[name] == nil, "\(name) is in the docs/settings.md table twice")
            rows[name] = cells[2]
        }
        let table = ServerConfiguration.settings
        #expect(
            Set(rows.keys) == Set(table.map(\.name)),
            "docs/settings.md rows and the settings table name different settings")
        for setting in table {
            #expect(rows[setting.name] == Self.readmeDefault(setting), "docs/settings.md default of \(setting.name)")
        }
    }

    @Test("deploy/env.example: every setting, each literal default as the table has it")
    func envExample() throws {
        let text = try String(
            contentsOf: Self.repository.appendingPathComponent("deploy/env.example"), encoding: .utf8)
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let assignment = line.hasPrefix("#") ? line.dropFirst() : line[...]
            guard assignment.hasPrefix("SIWA_"), let equals = assignment.firstIndex(of: "=") else { continue }
            let name = String(assignment[..<equals])
            #expect(values[name] == nil, "\(name) is in env.example twice")
            values[name] = String(assignment[assignment.index(after: equals)...])
        }
        let table = ServerConfiguration.settings
        #expect(
            Set(values.keys) == Set(table.map(\.name)), "env.example and the settings table name different settings")
        for setting in table where setting.isLiteralDefault {
            #expect(values[setting.name] == setting.defaultValue, "env.example default of \(setting.name)")
        }
    }
}
