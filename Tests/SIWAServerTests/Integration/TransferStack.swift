import Foundation
import SIWAJSON
import SIWARedis

/// A local stack for `siwa-endpoint transfer`: reconcile's stack (a real redis-server, the
/// sending team's P-256 key, the stand-in of Apple over HTTPS under a test CA) with a second
/// team, the recipient, whose key the stand-in knows too, and the stand-in's answers for
/// Apple's user migration endpoint.
final class TransferStack {
    static let clientID = ReconcileStack.clientID
    static let senderTeam = ReconcileStack.teamID
    static let recipientTeam = "RECIPIENT1"
    static let recipientKeyID = "RKEYID9876"

    enum Team { case sender, recipient }

    let base: ReconcileStack
    let recipientKeyPath: String
    let outDirectory: String
    private var exports: [String: JSONValue] = [:]
    private var imports: [String: JSONValue] = [:]

    init(appendOnlyRedis: Bool = false) throws {
        base = try ReconcileStack(appendOnlyRedis: appendOnlyRedis)
        recipientKeyPath = base.directory.appendingPathComponent("AuthKey_RECIPIENT.p8").path
        outDirectory = base.directory.appendingPathComponent("out").path
        try ReconcileStack.openssl([
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", recipientKeyPath,
        ])
        try ReconcileStack.openssl([
            "pkey", "-in", recipientKeyPath, "-pubout", "-out",
            base.directory.appendingPathComponent("recipient-public.pem").path,
        ])
    }

    /// The sending team's user `sub`, which Apple exchanges for `transferSub` (or answers `answer`).
    func exporting(_ sub: String, label: String, transferSub: String, answer: String = "ok") {
        exports[sub] = .object([
            "label": .string(label), "transfer_sub": .string(transferSub), "answer": .string(answer),
        ])
    }

    /// A transfer identifier Apple exchanges for `sub` (and `email`) for the recipient.
    func importing(
        _ transferSub: String, label: String, sub: String, email: String? = nil, answer: String = "ok"
    ) {
        var entry: [String: JSONValue] = ["label": .string(label), "sub": .string(sub), "answer": .string(answer)]
        if let email {
            entry["email"] = .string(email)
            entry["is_private_email"] = .bool(true)
        }
        imports[transferSub] = .object(entry)
    }

    /// A real team other than the recipient (an export's mistyped `--target`).
    static let otherTeam = "OTHERTEAM1"

    /// The file whose existence tells the stand-in the transfer has completed (with
    /// `start(transferCompletes: false)`, the recipient is refused until it is made).
    var transferCompletedFile: String { base.directory.appendingPathComponent("transfer-completed").path }

    func start(
        accessTokenSeconds: Int = 3600, accessTokenUses: Int = 0, stallSeconds: Int = 30, retryAfterSeconds: Int = 2,
        transferCompletes: Bool = true
    ) throws {
        let path = base.directory.appendingPathComponent("migration.json").path
        try JSONWriter.object([("export", .object(exports)), ("import", .object(imports))])
            .write(toFile: path, atomically: true, encoding: .utf8)
        base.standinArguments =
            [
                "--migration", path, "--recipient-team-id", Self.recipientTeam, "--recipient-key-id",
                Self.recipientKeyID,
                "--recipient-public-key", base.directory.appendingPathComponent("recipient-public.pem").path,
                "--access-token-seconds", String(accessTokenSeconds), "--access-token-uses", String(accessTokenUses),
                "--stall-seconds", String(stallSeconds), "--retry-after-seconds", String(retryAfterSeconds),
                "--other-team-ids", Self.otherTeam,
            ] + (transferCompletes ? [] : ["--transfer-completed-file", transferCompletedFile])
        try base.startStandin()
    }

    /// Three days ago (UTC), as `--transfer-date` takes it: well inside Apple's window.
    static var recentDate: String { date(daysAgo: 3) }

    static func date(daysAgo: Int) -> String {
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd"
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.locale = Locale(identifier: "en_US_POSIX")
        return formatter.string(from: Date().addingTimeInterval(-Double(daysAgo) * 86_400))
    }

    func environment(_ team: Team) -> [String: String] {
        var environment = base.environment
        environment["SIWA_APPLE_MIGRATION_URL"] = base.tokenURL.replacingOccurrences(
            of: "/auth/token", with: "/auth/usermigrationinfo")
        if team == .recipient {
            environment["SIWA_APPLE_TEAM_ID"] = Self.recipientTeam
            environment["SIWA_APPLE_KEY_ID"] = Self.recipientKeyID
            environment["SIWA_APPLE_PRIVATE_KEY_FILE"] = recipientKeyPath
        }
        return environment
    }

    /// The command line of `transfer export` (sending team) or `import` (recipient) on `lines`.
    func arguments(
        _ direction: String, _ lines: [String], date: String? = recentDate, rate: String = "50",
        target: String = recipientTeam, out: String? = nil, extra: [String] = []
    ) throws -> [String] {
        let input = base.directory.appendingPathComponent("\(direction)-\(UUID().uuidString).txt")
        try lines.map { $0 + "\n" }.joined().write(to: input, atomically: true, encoding: .utf8)
        var arguments = [
            "transfer", direction, "--client-id", Self.clientID, "--out", out ?? outDirectory, "--rate", rate,
        ]
        if direction == "export" { arguments += ["--target", target] }
        if let date { arguments += ["--transfer-date", date] }
        return arguments + extra + [input.path]
    }

    func run(
        _ direction: String, _ lines: [String], date: String? = recentDate, rate: String = "50",
        target: String = recipientTeam, out: String? = nil, extra: [String] = [], overriding: [String: String] = [:]
    ) throws -> CommandRun {
        try CommandRun.endpoint(
            try arguments(direction, lines, date: date, rate: rate, target: target, out: out, extra: extra),
            environment: environment(direction == "export" ? .sender : .recipient).merging(overriding) { $1 })
    }

    /// Standard output's JSON lines, each as its members (nested objects flattened as `held.<name>`).
    func outcomes(_ text: String) -> [[String: String]] {
        text.split(separator: "\n").compactMap { line in
            guard case .object(let members)? = try? StrictJSONParser.parse(Array(line.utf8)) else { return nil }
            var flat: [String: String] = [:]
            for (name, value) in members {
                switch value {
                case .string(let text): flat[name] = text
                case .integer(let number): flat[name] = String(number)
                case .bool(let flag): flat[name] = flag ? "true" : "false"
                case .object(let inner):
                    for (innerName, innerValue) in inner {
                        if case .string(let text) = innerValue { flat["\(name).\(innerName)"] = text }
                    }
                default: break
                }
            }
            return flat
        }
    }

    func file(_ name: String) -> String? {
        try? String(contentsOfFile: (outDirectory as NSString).appendingPathComponent(name), encoding: .utf8)
    }

    func mode(_ name: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(
            atPath: (outDirectory as NSString).appendingPathComponent(name))
        return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    func hash(_ key: String) throws -> [String: String] {
        try base.redisConnection().command("HGETALL", key).fieldMap ?? [:]
    }

    func members(_ key: String) throws -> Set<String> {
        Set((try base.redisConnection().command("SMEMBERS", key).array ?? []).compactMap(\.string))
    }

    /// What the stand-in logged for the user migration endpoint and the access tokens.
    func migrationLog() throws -> [[String: String]] {
        try base.standinLog().filter { $0["endpoint"] == "migration" || $0["grant"] == "client_credentials" }
    }

    func shutdown() { base.shutdown() }
}
