import Foundation
import SIWAJSON
import SIWARedis
import SIWAVerification

/// A local stack for `siwa-endpoint reconcile`: a real redis-server, EC P-256 test
/// keys made by the openssl CLI, and a stand-in for Apple's token endpoint
/// (deploy-tests/standins/apple_token_standin.py) over HTTPS under a test CA. Apple itself
/// cannot be reached from a test; the stand-in checks the client secret exactly
/// (ES256 with the key's public part, every claim) and answers per refresh token.
final class ReconcileStack {
    static let clientID = "com.example.app"
    static let teamID = "TEAMID1234"
    static let keyID = "KEYID56789"

    static let standinScript = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("deploy-tests/standins/apple_token_standin.py").path

    /// What the stand-in answers for one token.
    enum Answer: String {
        case valid, refused, error500, error500Once = "error500_once", stall, throttle
    }

    /// One request the stand-in received, by token label (it never logs a token).
    struct StandinRequest: Equatable {
        let label: String?
        let answer: String
        let problem: String?
    }

    let directory: URL
    let redis: RedisServerProcess
    let authority: TestCertificateAuthority
    /// The test Sign in with Apple key (.p8, PKCS#8 PEM) whose public part the stand-in trusts.
    let keyPath: String
    /// Another P-256 key: a secret signed with it must be refused (invalid_client).
    let wrongKeyPath: String
    let tokensPath: String
    let standinLogPath: String
    private var tokens: [String: (label: String, answer: Answer)] = [:]
    private var standin: Process?
    private(set) var tokenURL = ""
    /// More arguments for the stand-in (the app transfer's second team and answers).
    var standinArguments: [String] = []

    init(appendOnlyRedis: Bool = false) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-reconcile-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        redis = try RedisServerProcess(appendOnly: appendOnlyRedis)
        authority = try TestCertificateAuthority(in: directory)
        keyPath = directory.appendingPathComponent("AuthKey_TEST.p8").path
        wrongKeyPath = directory.appendingPathComponent("AuthKey_OTHER.p8").path
        tokensPath = directory.appendingPathComponent("tokens.json").path
        standinLogPath = directory.appendingPathComponent("standin.log").path
        for path in [keyPath, wrongKeyPath] {
            try Self.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
        }
        try Self.openssl([
            "pkey", "-in", keyPath, "-pubout", "-out", directory.appendingPathComponent("public.pem").path,
        ])
    }

    /// A fresh, distinctive refresh token the stand-in answers with `answer`.
    func token(_ label: String, _ answer: Answer) -> String {
        let token = "rt.\(label).\(UUID().uuidString.lowercased())"
        tokens[token] = (label, answer)
        return token
    }

    /// Starts the stand-in with the tokens made so far; waits for its "listening PORT".
    func startStandin() throws {
        let document = JSONWriter.object(
            tokens.map { token, entry in
                (token, .object(["label": .string(entry.label), "answer": .string(entry.answer.rawValue)]))
            })
        try document.write(toFile: tokensPath, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ExampleFiles.python)
        process.arguments =
            [
                Self.standinScript, "--cert", authority.serverCertificatePath, "--key", authority.serverKeyPath,
                "--public-key", directory.appendingPathComponent("public.pem").path, "--team-id", Self.teamID,
                "--key-id", Self.keyID, "--client-ids", Self.clientID, "--tokens", tokensPath, "--log", standinLogPath,
            ] + standinArguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        standin = process
        // Blocks until the line arrives, or returns empty when the process died.
        var text = ""
        while !text.contains("\n") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        guard text.hasPrefix("listening "), let port = Int(text.dropFirst(10).prefix { $0.isNumber }) else {
            throw TestCertificateAuthority.Failure(description: "the token endpoint stand-in did not start: \(text)")
        }
        tokenURL = "https://localhost:\(port)/auth/token"
    }

    /// Apple's timeout is 5 s: the stand-in makes each TLS handshake on one thread and runs
    /// `openssl dgst` per request, and on a loaded machine an answer can take over a second;
    /// a timeout there would add an attempt to the exact counts the tests read. A stalled
    /// answer (30 s) still times out.
    var environment: [String: String] {
        [
            "PATH": "/usr/bin:/bin",
            "SIWA_APPLE_TEAM_ID": Self.teamID, "SIWA_APPLE_KEY_ID": Self.keyID, "SIWA_APPLE_PRIVATE_KEY_FILE": keyPath,
            "SIWA_APPLE_TOKEN_URL": tokenURL, "SIWA_APPLE_CA_FILE": authority.caCertificatePath,
            "SIWA_APPLE_REVOKE_URL": tokenURL.replacingOccurrences(of: "/auth/token", with: "/auth/revoke"),
            "SIWA_APPLE_TIMEOUT_SECONDS": "5", "SIWA_APPLE_ATTEMPTS": "3", "SIWA_APPLE_RETRY_DELAY_MS": "50",
            "SIWA_REDIS_URL": redis.url(), "SIWA_REDIS_TIMEOUT_MS": "1000",
        ]
    }

    /// Runs `siwa-endpoint reconcile` on `lines` (a file) to the end.
    func reconcile(_ lines: [String], overriding: [String: String] = [:], rate: String = "50") throws -> CommandRun {
        let input = directory.appendingPathComponent("users-\(UUID().uuidString).jsonl")
        try lines.map { $0 + "\n" }.joined().write(to: input, atomically: true, encoding: .utf8)
        return try CommandRun.endpoint(
            ["reconcile", "--rate", rate, input.path],
            environment: environment.merging(overriding) { _, override in override })
    }

    /// Runs `siwa-endpoint revoke` on `lines` (a file) to the end.
    func revoke(_ lines: [String], overriding: [String: String] = [:]) throws -> CommandRun {
        let input = directory.appendingPathComponent("revoke-\(UUID().uuidString).jsonl")
        try lines.map { $0 + "\n" }.joined().write(to: input, atomically: true, encoding: .utf8)
        return try CommandRun.endpoint(
            ["revoke", "--rate", "50", input.path],
            environment: environment.merging(overriding) { _, override in override })
    }

    /// The raw log lines of the stand-in, each as its members (strings only).
    func standinLog() throws -> [[String: String]] {
        guard FileManager.default.fileExists(atPath: standinLogPath) else { return [] }
        return try String(contentsOfFile: standinLogPath, encoding: .utf8).split(separator: "\n").map { line in
            guard case .object(let members) = try StrictJSONParser.parse(Array(line.utf8)) else { return [:] }
            return members.compactMapValues { if case .string(let text) = $0 { text } else { nil } }
        }
    }

    /// What the stand-in received, in order.
    func standinRequests() throws -> [StandinRequest] {
        guard FileManager.default.fileExists(atPath: standinLogPath) else { return [] }
        return try String(contentsOfFile: standinLogPath, encoding: .utf8).split(separator: "\n").map { line in
            guard case .object(let members) = try StrictJSONParser.parse(Array(line.utf8)) else {
                return StandinRequest(label: nil, answer: "?", problem: nil)
            }
            func text(_ name: String) -> String? {
                if case .string(let value)? = members[name] { return value }
                return nil
            }
            return StandinRequest(label: text("label"), answer: text("answer") ?? "?", problem: text("problem"))
        }
    }

    /// How many requests the stand-in received for each token label.
    func requestCounts() throws -> [String: Int] {
        try standinRequests().reduce(into: [:]) { counts, request in counts[request.label ?? "-", default: 0] += 1 }
    }

    func redisConnection() -> RedisConnection {
        RedisConnection(endpoint: try! RedisEndpoint(parsing: redis.url()))
    }

    func userHash(sub: String) throws -> [String: String] {
        try redisConnection().command("HGETALL", "siwa:user:{\(Self.clientID):\(sub)}").fieldMap ?? [:]
    }

    /// Every key with every value it holds, as text: what "no token in Redis" is checked against.
    func redisDump() throws -> String {
        let connection = redisConnection()
        var dump = ""
        for key in (try connection.command("KEYS", "*").array ?? []).compactMap(\.string).sorted() {
            let reply: RedisReply
            switch try connection.command("TYPE", key).string {
            case "hash": reply = try connection.command("HGETALL", key)
            case "stream": reply = try connection.command("XRANGE", key, "-", "+")
            default: reply = try connection.command("GET", key)
            }
            dump += "\(key) \(Self.flatten(reply))\n"
        }
        return dump
    }

    /// The stream entries as field maps, oldest first.
    func streamEntries() throws -> [[String: String]] {
        (try redisConnection().command("XRANGE", "siwa:events", "-", "+").array ?? []).compactMap {
            $0.array?.last?.fieldMap
        }
    }

    private static func flatten(_ reply: RedisReply) -> String {
        if let array = reply.array { return array.map(flatten).joined(separator: " ") }
        return reply.string ?? reply.integer.map(String.init) ?? ""
    }

    func shutdown() {
        if let standin, standin.isRunning {
            // SIGKILL: the test process may block SIGTERM, and a child inherits the mask.
            kill(standin.processIdentifier, SIGKILL)
            standin.waitUntilExit()
        }
        redis.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }

    static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestCertificateAuthority.Failure(description: "openssl \(arguments[0]) failed")
        }
    }
}
