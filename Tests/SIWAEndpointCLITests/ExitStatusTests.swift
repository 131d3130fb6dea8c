import Foundation
import Glibc
import SIWATestSupport
import Testing

/// Every command against the one exit-status table (docs/operations.md, "Exit status"):
/// the real binary, a Redis port nothing listens on, and a stand-in for Apple that is a
/// listening socket nobody answers (so "nothing was asked of Apple" can be checked).
@Suite("Exit status: one table for every command", .serialized)
final class ExitStatusTests {
    let directory: URL
    /// A loopback listener for Apple's URLs: a connection would wait in its backlog.
    let apple: Int32
    let applePort: Int
    let redisPort: Int

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-exit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        (apple, applePort) = try Self.listener()
        redisPort = try LoopbackPort.free()
        let key = directory.appendingPathComponent("AuthKey_TEST.p8").path
        let openssl = try CommandRun.run(
            URL(fileURLWithPath: "/usr/bin/openssl"),
            ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
        #expect(openssl.status == 0, "\(openssl.errors)")
        let webhookKey = directory.appendingPathComponent("webhook.key").path
        let keygen = try EndpointBinary.run(["deliver", "keygen", "--scheme", "hmac", "--out", webhookKey])
        #expect(keygen.status == 0, "\(keygen.standardError)")
        let destinations =
            #"{"destinations":[{"name":"one","url":"http://127.0.0.1:\#(applePort)/hook","#
            + #""allow_private_address":true,"signing_key_files":["\#(webhookKey)"]}]}"#
        try Data(destinations.utf8).write(to: directory.appendingPathComponent("webhooks.json"))
    }

    deinit {
        close(apple)
        try? FileManager.default.removeItem(at: directory)
    }

    /// Settings every command accepts: Redis at a port nothing listens on, Apple at the listener.
    var environment: [String: String] {
        [
            "PATH": "/usr/bin:/bin", "SIWA_CLIENT_IDS": "com.example.app",
            "SIWA_REDIS_URL": "redis://127.0.0.1:\(redisPort)/0", "SIWA_REDIS_TIMEOUT_MS": "300",
            "SIWA_APPLE_TEAM_ID": "TEAMID1234", "SIWA_APPLE_KEY_ID": "KEYID56789",
            "SIWA_APPLE_PRIVATE_KEY_FILE": directory.appendingPathComponent("AuthKey_TEST.p8").path,
            "SIWA_APPLE_TOKEN_URL": "http://127.0.0.1:\(applePort)/auth/token",
            "SIWA_APPLE_REVOKE_URL": "http://127.0.0.1:\(applePort)/auth/revoke",
            "SIWA_APPLE_MIGRATION_URL": "http://127.0.0.1:\(applePort)/usermigrationinfo",
            "SIWA_WEBHOOK_DESTINATIONS": directory.appendingPathComponent("webhooks.json").path,
            // A request that reached the listener would wait one second once, not ten three times.
            "SIWA_APPLE_TIMEOUT_SECONDS": "1", "SIWA_APPLE_ATTEMPTS": "1", "SIWA_WEBHOOK_TIMEOUT_MS": "1000",
        ]
    }

    static let userLine = Data(#"{"client_id":"com.example.app","sub":"000111.a.b","refresh_token":"rt"}"#.utf8 + [10])

    /// Each command that reads Redis, with what it needs to get that far.
    var redisCommands: [(arguments: [String], input: Data?)] {
        let today = String(ISO8601DateFormatter().string(from: Date()).prefix(10))
        return [
            (["user", "com.example.app", "000111.a.b"], nil),
            (["deletions"], nil),
            (["deliver", "status"], nil),
            (["deliver", "enable", "--destination", "one"], nil),
            (["deliver", "replay", "--destination", "one", "--since", "0"], nil),
            (["reconcile", "-"], Self.userLine),
            (["revoke", "-"], Self.userLine),
            (
                [
                    "transfer", "export", "--target", "TEAMID9876", "--client-id", "com.example.app", "--out",
                    directory.appendingPathComponent("out").path, "--transfer-date", today, "-",
                ], Data("000111.a.b\n".utf8)
            ),
            (
                ["canary", "--client-id", "com.example.app", "--sub", "000111.a.b", "--token-file", "-"],
                Data("rt.canary\n".utf8)
            ),
        ]
    }

    func run(_ arguments: [String], input: Data?, environment: [String: String]) throws -> CommandRun {
        try CommandRun.run(EndpointBinary.url, arguments, environment: environment, input: input)
    }

    @Test("Redis not answering is exit 3 in every command that reads it, and nothing is asked of Apple")
    func redisUnreachableIsThree() throws {
        for command in redisCommands {
            let run = try run(command.arguments, input: command.input, environment: environment)
            #expect(run.status == 3, "\(command.arguments.prefix(2)): \(run.errors)")
            #expect(!run.timedOut)
            #expect(
                acceptWaiting() == 0, "\(command.arguments.prefix(2)) asked Apple (or a webhook) while Redis was down")
        }
    }

    @Test("a usage mistake is exit 2 in every command, with nothing on standard output")
    func usageIsTwo() throws {
        let subcommands = [
            "serve", "keygen", "sign", "verify", "bench", "load", "user", "status", "spool", "reconcile", "revoke",
            "deletions", "transfer", "canary", "deliver",
        ]
        for subcommand in subcommands {
            let run = try run([subcommand, "--no-such-option"], input: nil, environment: environment)
            #expect(run.status == 2, "\(subcommand): \(run.errors)")
            #expect(run.output.isEmpty, "\(subcommand)")
            #expect(run.errors.contains("unknown option --no-such-option"), "\(subcommand): \(run.errors)")
        }
        let unknown = try run(["no-such-command"], input: nil, environment: environment)
        #expect(unknown.status == 2)
        #expect(unknown.errors.contains("unknown subcommand no-such-command"))
    }

    @Test("a setting refused is exit 2 in every command that reads settings: one configuration_invalid line")
    func settingRefusedIsTwo() throws {
        var refused = environment
        refused["SIWA_REDIS_URL"] = "redis://127.0.0.1:99999/0"
        for command in redisCommands + [(["serve", "--check", "--offline"], nil)] {
            let run = try run(command.arguments, input: command.input, environment: refused)
            #expect(run.status == 2, "\(command.arguments.prefix(2)): \(run.errors)")
            #expect(run.output.isEmpty, "\(command.arguments.prefix(2))")
            #expect(
                run.errors.contains(#""event":"configuration_invalid""#)
                    && run.errors.contains(#""setting":"SIWA_REDIS_URL""#),
                "\(command.arguments.prefix(2)): \(run.errors)")
            #expect(acceptWaiting() == 0, "\(command.arguments.prefix(2)) asked Apple with a setting refused")
        }
    }

    @Test("--json is taken by every command that reports; canary and reconcile then write one JSON document")
    func jsonEverywhere() throws {
        for command in redisCommands {
            let run = try run(command.arguments + ["--json"], input: command.input, environment: environment)
            #expect(run.status == 3, "\(command.arguments.prefix(2)) --json: \(run.errors)")
        }
        let canary = try run(
            redisCommands[8].arguments + ["--json"], input: redisCommands[8].input, environment: environment)
        #expect(
            canary.output == #"{"outcome":"redis_unreachable","sub":"000111.a.b","revoked":false}"# + "\n",
            "\(canary.errors)")
        let reconcile = try run(["reconcile", "--json", "-"], input: Self.userLine, environment: environment)
        #expect(
            reconcile.output
                == #"{"checked":0,"still_valid":0,"refused":0,"skipped":0,"unknown":0,"malformed":0}"# + "\n")
        let spool = try run(
            ["spool", "status", "--json", "--spool-dir", directory.path], input: nil, environment: environment)
        #expect(spool.status != 2, "\(spool.errors)")
        let status = try run(
            ["status", "--json", "--socket", directory.appendingPathComponent("none.sock").path], input: nil,
            environment: environment)
        #expect(status.status == 3, "\(status.errors)")
    }

    @Test("status: nothing listening on the socket is exit 3, the deployment not answering")
    func statusWithoutResponderIsThree() throws {
        let run = try run(
            ["status", "--socket", directory.appendingPathComponent("none.sock").path], input: nil,
            environment: environment)
        #expect(run.status == 3, "\(run.errors)")
        #expect(run.output.isEmpty)
    }

    @Test("--help prints the table, and docs/operations.md holds the same rows")
    func tableDocumented() throws {
        let help = try run(["--help"], input: nil, environment: environment)
        #expect(help.status == 0)
        let rows = help.output.split(separator: "\n").compactMap { line -> (String, String)? in
            let parts = line.trimmingCharacters(in: .whitespaces).split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let status = Int(parts[0]), (0...255).contains(status) else { return nil }
            return (String(parts[0]), String(parts[1]))
        }
        #expect(rows.map(\.0) == ["0", "1", "2", "3", "4", "5", "141"], "\(help.output)")
        let docs = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("docs/operations.md"), encoding: .utf8)
        for (status, _) in rows {
            #expect(docs.contains("\n| \(status) | "), "docs/operations.md lacks the row of exit \(status)")
        }
    }

    /// Connections made to the Apple listener since the last call (each accepted and closed).
    func acceptWaiting() -> Int {
        var count = 0
        for _ in 0..<100 {
            let connection = accept(apple, nil, nil)
            guard connection >= 0 else { break }
            close(connection)
            count += 1
        }
        return count
    }

    struct ListenerUnavailable: Error {}

    /// A non-blocking listener on 127.0.0.1 and its port.
    static func listener() throws -> (Int32, Int) {
        let descriptor = socket(
            AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(descriptor, generic, length) == 0 && getsockname(descriptor, generic, &length) == 0
            }
        }
        guard descriptor >= 0, bound, listen(descriptor, 16) == 0 else {
            throw ListenerUnavailable()
        }
        return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
    }
}
