import Foundation
import Testing

/// `status`, `spool` and `user` read serve's settings through the one table, from the
/// environment and `--env-file` (the environment wins), and refuse a bad value the way
/// serve does: exit 2 and one `configuration_invalid` JSON line naming the setting.
@Suite("Operator commands read serve's settings")
struct OperatorSettingsTests {
    /// A directory of the test's own, removed at the end.
    final class Scratch {
        let directory: URL
        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "siwa-operator-settings-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(at: directory) }

        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

        /// An env file holding `lines`, its path.
        func envFile(_ lines: String) throws -> String {
            let path = path("settings-\(UUID().uuidString).env")
            try Data(lines.utf8).write(to: URL(fileURLWithPath: path))
            return path
        }
    }

    /// Exit 2, nothing on standard output, and one line on standard error: the
    /// `configuration_invalid` JSON object naming `setting`, its message beginning with it.
    static func expectRefused(_ run: CommandRun, setting: String, _ context: String) {
        #expect(run.status == 2, "\(context): \(run.errors)")
        #expect(run.output.isEmpty, "\(context): \(run.output)")
        let lines = run.errors.split(separator: "\n")
        #expect(lines.count == 1, "\(context): \(run.errors)")
        guard let line = lines.first,
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        else {
            Issue.record("\(context): not one JSON line: \(run.errors)")
            return
        }
        #expect(object["event"] as? String == "configuration_invalid", "\(context)")
        #expect(object["setting"] as? String == setting, "\(context)")
        #expect((object["message"] as? String)?.hasPrefix(setting + " ") == true, "\(context)")
    }

    @Test("status: the socket from --env-file, the environment winning; a bad SIWA_FCGI_SOCKET refused")
    func status() throws {
        let scratch = try Scratch()
        // Nothing listens there: the answer names the socket it asked (exit 3).
        let fromFile = try scratch.envFile("SIWA_FCGI_SOCKET=\(scratch.path("from-file.sock"))\n")
        let run = try CommandRun.endpoint(["status", "--env-file", fromFile])
        #expect(run.status == 3, "\(run.errors)")
        #expect(run.errors.contains("no answer on \(scratch.path("from-file.sock")):"), "\(run.errors)")
        let environmentWins = try CommandRun.endpoint(
            ["status", "--env-file", fromFile], environment: ["SIWA_FCGI_SOCKET": scratch.path("from-env.sock")])
        #expect(environmentWins.status == 3)
        #expect(environmentWins.errors.contains("no answer on \(scratch.path("from-env.sock")):"))

        let bad = try scratch.envFile("SIWA_FCGI_SOCKET=localhost:9000\n")
        Self.expectRefused(
            try CommandRun.endpoint(["status", "--env-file", bad]), setting: "SIWA_FCGI_SOCKET", "status --env-file")
        Self.expectRefused(
            try CommandRun.endpoint(["status"], environment: ["SIWA_FCGI_SOCKET": "relative.sock"]),
            setting: "SIWA_FCGI_SOCKET", "status with the environment")
    }

    @Test("spool: the directory from --env-file; a bad SIWA_SPOOL_DIR refused, nothing created")
    func spool() throws {
        let scratch = try Scratch()
        let spoolDirectory = scratch.path("spool")
        try FileManager.default.createDirectory(atPath: spoolDirectory, withIntermediateDirectories: true)
        let fromFile = try scratch.envFile("SIWA_SPOOL_DIR=\(spoolDirectory)\n")
        let run = try CommandRun.endpoint(["spool", "status", "--env-file", fromFile])
        #expect(run.status == 0, "\(run.errors)")
        let object = try JSONSerialization.jsonObject(with: Data(run.output.utf8)) as? [String: Any]
        #expect(object?["spool_dir"] as? String == spoolDirectory)
        #expect(object?["depth"] as? Int == 0)

        let bad = try scratch.envFile("SIWA_SPOOL_DIR=relative/spool\n")
        for action in ["status", "list", "requeue"] {
            Self.expectRefused(
                try CommandRun.endpoint(["spool", action, "--env-file", bad]), setting: "SIWA_SPOOL_DIR",
                "spool \(action)")
        }
        #expect(!FileManager.default.fileExists(atPath: "relative"))
    }

    @Test("user: a bad setting from --env-file refused with the configuration_invalid line, before any Redis")
    func user() throws {
        let scratch = try Scratch()
        let bad = try scratch.envFile("SIWA_REDIS_URL=redis://127.0.0.1:1/0\nSIWA_REDIS_TIMEOUT_MS=0\n")
        Self.expectRefused(
            try CommandRun.endpoint(["user", "com.example.app", "000001.a.0001", "--env-file", bad]),
            setting: "SIWA_REDIS_TIMEOUT_MS", "user --env-file")
        Self.expectRefused(
            try CommandRun.endpoint(
                ["user", "com.example.app", "000001.a.0001"], environment: ["SIWA_KEY_PREFIX": "bad prefix"]),
            setting: "SIWA_KEY_PREFIX", "user with the environment")
    }

    @Test(
        "reconcile and revoke refuse a bad setting with the configuration_invalid line alone, no plain-text line beside it"
    )
    func reconcileAndRevokeRefuseWithOneLine() throws {
        let scratch = try Scratch()
        let bad = try scratch.envFile("SIWA_REDIS_TIMEOUT_MS=0\n")
        for command in ["reconcile", "revoke"] {
            Self.expectRefused(
                try CommandRun.endpoint([command, "--env-file", bad, scratch.path("users.jsonl")]),
                setting: "SIWA_REDIS_TIMEOUT_MS", "\(command) --env-file")
        }
    }

    @Test("an empty --env-file (an empty file, /dev/null) holds no setting and is read, not refused")
    func emptyEnvFileIsValid() throws {
        let scratch = try Scratch()
        let spoolDirectory = scratch.path("spool")
        try FileManager.default.createDirectory(atPath: spoolDirectory, withIntermediateDirectories: true)
        for envFile in ["/dev/null", try scratch.envFile("")] {
            let run = try CommandRun.endpoint(
                ["spool", "status", "--env-file", envFile], environment: ["SIWA_SPOOL_DIR": spoolDirectory])
            #expect(run.status == 0, "\(envFile): \(run.errors)")
            #expect(run.errors.isEmpty, "\(envFile): \(run.errors)")
            let object = try JSONSerialization.jsonObject(with: Data(run.output.utf8)) as? [String: Any]
            #expect(object?["spool_dir"] as? String == spoolDirectory, "\(envFile)")
        }
        // A file that cannot be read is still refused, naming --env-file.
        Self.expectRefused(
            try CommandRun.endpoint(["spool", "status", "--env-file", scratch.path("missing.env")]),
            setting: "--env-file", "a missing env file")
    }

    /// Each command that reads serve's settings, with a setting it reads and a value the
    /// table refuses.
    static let readers: [(arguments: [String], setting: String, value: String)] = [
        (["serve"], "SIWA_WORKERS", "0"),
        (["serve", "--check"], "SIWA_WORKERS", "0"),
        (["serve", "--check", "--offline"], "SIWA_REDIS_TIMEOUT_MS", "0"),
        (["status"], "SIWA_FCGI_SOCKET", "relative.sock"),
        (["spool", "status"], "SIWA_SPOOL_DIR", "relative/spool"),
        (["spool", "list"], "SIWA_SPOOL_DIR", "relative/spool"),
        (["user", "com.example.app", "000001.a.0001"], "SIWA_REDIS_TIMEOUT_MS", "0"),
        (["reconcile", "-"], "SIWA_REDIS_TIMEOUT_MS", "0"),
        (["revoke", "-"], "SIWA_REDIS_TIMEOUT_MS", "0"),
        (
            ["transfer", "import", "--client-id", "com.example.app", "--out", "transfer-out", "-"],
            "SIWA_REDIS_TIMEOUT_MS", "0"
        ),
        (["deletions"], "SIWA_REDIS_TIMEOUT_MS", "0"),
        (["deletions", "--json"], "SIWA_KEY_PREFIX", "bad prefix"),
    ]

    @Test(
        "every command reads settings the same way and refuses a bad one the same way: one configuration_invalid line, exit 2, nothing on stdout, from the environment and from --env-file",
        arguments: 0..<readers.count)
    func everyCommandRefusesAlike(_ index: Int) throws {
        let scratch = try Scratch()
        let (arguments, setting, value) = Self.readers[index]
        let valid = ["SIWA_CLIENT_IDS": "com.example.app", "SIWA_REDIS_URL": "redis://127.0.0.1:1/0"]
        let context = "\(arguments.joined(separator: " ")) \(setting)=\(value)"
        Self.expectRefused(
            try CommandRun.endpoint(arguments, environment: valid.merging([setting: value]) { $1 }), setting: setting,
            context + " (environment)")
        let envFile = try scratch.envFile("\(setting)=\(value)\n")
        Self.expectRefused(
            try CommandRun.endpoint(arguments + ["--env-file", envFile], environment: valid), setting: setting,
            context + " (--env-file)")
    }

    @Test(
        "status, spool, user and deletions warn about a SIWA_ name in no row of the table, one unknown_setting line, as serve and reconcile do",
        arguments: [
            ["status"], ["spool", "status"], ["user", "com.example.app", "000001.a.0001"], ["deletions"],
        ])
    func everyCommandWarnsAboutAnUnknownName(_ arguments: [String]) throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.path("spool"), withIntermediateDirectories: true)
        // Nothing answers on the socket or at Redis: each command still reads its settings first.
        let environment = [
            "SIWA_FCGI_SOCKET": scratch.path("fcgi.sock"), "SIWA_SPOOL_DIR": scratch.path("spool"),
            "SIWA_REDIS_URL": "redis://127.0.0.1:1/0", "SIWA_REDIS_TIMEOUT_MS": "200",
        ]
        let envFile = try scratch.envFile("SIWA_NOT_A_SETTING=1\n")
        let run = try CommandRun.endpoint(arguments + ["--env-file", envFile], environment: environment)
        let warnings = run.errors.split(separator: "\n").filter { $0.contains(#""event":"unknown_setting""#) }
        #expect(warnings.count == 1, "\(arguments): \(run.errors)")
        #expect(warnings.first?.contains(#""setting":"SIWA_NOT_A_SETTING""#) == true, "\(run.errors)")
        #expect(run.status != 2, "\(arguments): an unknown name is warned about, not refused: \(run.errors)")
    }
}
