import Foundation
import Glibc
import SIWATestSupport
import Testing

/// `serve --check` and `serve` refuse the same values the same way: exit 2, one
/// `configuration_invalid` JSON line naming the setting, and no `started` line.
@Suite("Settings refused by serve and serve --check alike")
struct SettingsRefusalTests {
    /// A temporary directory with a valid set of settings pointing into it.
    final class Scratch {
        let directory: URL
        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "siwa-settings-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            _ = FileManager.default.createFile(atPath: path("regular-file"), contents: Data("x".utf8))
        }
        deinit { try? FileManager.default.removeItem(at: directory) }

        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

        /// Valid settings: nothing here can be reached (port 1), so a `serve` that is not
        /// refused starts, spools and keeps running.
        var environment: [String: String] {
            [
                "SIWA_CLIENT_IDS": "com.example.app", "SIWA_JWKS_URL": "http://127.0.0.1:1/keys",
                "SIWA_JWKS_CACHE": path("jwks.json"), "SIWA_REDIS_URL": "redis://127.0.0.1:1/0",
                "SIWA_FCGI_SOCKET": path("fcgi.sock"), "SIWA_SPOOL_DIR": path("spool"), "SIWA_WORKERS": "1",
                "SIWA_JWKS_TIMEOUT_SECONDS": "1", "PATH": "/usr/bin:/bin",
            ]
        }
    }

    struct Outcome {
        var status: Int32?
        var standardOutput: String
        var standardError: String
    }

    /// Runs the binary; a run still going after `timeout` (a serve that was not refused) is
    /// killed and reported with a nil status.
    static func run(_ arguments: [String], environment: [String: String], timeout: TimeInterval = 20) throws -> Outcome
    {
        let run = try CommandRun.run(
            EndpointBinary.url, arguments, environment: environment, timeout: .milliseconds(Int64(timeout * 1000)))
        return Outcome(
            status: run.timedOut ? nil : run.status, standardOutput: run.output, standardError: run.errors)
    }

    /// Exit 2, nothing on standard output, the refusal as one JSON line naming `setting`, and
    /// no `started` line. `alone`: the refusal is the only line (a setting refused before
    /// anything runs); otherwise it is the last line (the socket is made after the keys load).
    static func expectRefused(_ outcome: Outcome, setting: String, alone: Bool = true, _ context: String) {
        #expect(outcome.status == 2, "\(context): \(outcome.standardError)")
        #expect(outcome.standardOutput.isEmpty, "\(context)")
        let lines = outcome.standardError.split(separator: "\n")
        if alone { #expect(lines.count == 1, "\(context): \(outcome.standardError)") }
        #expect(!outcome.standardError.contains(#""event":"started""#), "\(context)")
        guard let line = lines.last,
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        else {
            Issue.record("\(context): not a JSON line: \(outcome.standardError)")
            return
        }
        #expect(object["event"] as? String == "configuration_invalid", "\(context)")
        #expect(object["setting"] as? String == setting, "\(context)")
        #expect((object["message"] as? String)?.hasPrefix(setting + " ") == true, "\(context)")
    }

    /// What each case sets, given the scratch directory.
    static let cases: [(setting: String, value: @Sendable (Scratch) -> String)] = [
        ("SIWA_REDIS_URL", { _ in "redis://" }),
        ("SIWA_REDIS_URL", { _ in "redis://h:99999" }),
        ("SIWA_REDIS_URL", { _ in "redis://127.0.0.1:6379/abc" }),
        ("SIWA_REDIS_URL", { _ in "redis://:@127.0.0.1:6379/0" }),
        ("SIWA_REDIS_URL", { _ in "redis://127.0.0.1:6379/0?db=1" }),
        ("SIWA_SPOOL_DIR", { $0.path("regular-file") }),
        ("SIWA_SPOOL_DIR", { $0.path("regular-file/spool") }),
        ("SIWA_FCGI_SOCKET", { _ in "127.1.2.300:9000" }),
        ("SIWA_FCGI_SOCKET", { $0.path("regular-file") }),
        ("SIWA_FCGI_SOCKET", { $0.path("no-such-directory/fcgi.sock") }),
        ("SIWA_FCGI_SOCKET_GROUP", { _ in "siwa-no-such-group" }),
    ]

    @Test("each value is refused by --check and by serve, naming its setting", arguments: 0..<cases.count)
    func refused(_ index: Int) throws {
        let scratch = try Scratch()
        let (setting, value) = Self.cases[index]
        var environment = scratch.environment
        environment[setting] = value(scratch)
        let context = "\(setting)=\(environment[setting]!)"
        Self.expectRefused(
            try Self.run(["serve", "--check"], environment: environment), setting: setting, "--check " + context)
        Self.expectRefused(try Self.run(["serve"], environment: environment), setting: setting, "serve " + context)
        // Refused means untouched: the regular file is still what it was.
        #expect(try String(contentsOfFile: scratch.path("regular-file"), encoding: .utf8) == "x")
    }

    @Test("a replica wait as long as the Redis timeout is refused when replicas are asked for, accepted without")
    func replicaTimeoutWithinTheCommandTimeout() throws {
        let scratch = try Scratch()
        var environment = scratch.environment
        environment["SIWA_REDIS_TIMEOUT_MS"] = "500"
        environment["SIWA_REDIS_REPLICA_TIMEOUT_MS"] = "500"
        // Without SIWA_REDIS_MIN_REPLICAS no WAIT is sent: the value is harmless.
        #expect(try Self.run(["serve", "--check"], environment: environment).status == 0)
        environment["SIWA_REDIS_MIN_REPLICAS"] = "1"
        for arguments in [["serve", "--check"], ["serve"]] {
            Self.expectRefused(
                try Self.run(arguments, environment: environment), setting: "SIWA_REDIS_REPLICA_TIMEOUT_MS",
                arguments.joined(separator: " "))
        }
        environment["SIWA_REDIS_REPLICA_TIMEOUT_MS"] = "499"
        #expect(try Self.run(["serve", "--check"], environment: environment).status == 0)
    }

    /// Runs the binary with standard error going to a file; JOURNAL_STREAM names that file
    /// (as systemd names the journal's stream) when `asJournal`, another inode otherwise.
    static func runToFile(_ arguments: [String], environment: [String: String], asJournal: Bool, in scratch: Scratch)
        throws -> (status: Int32, standardError: String)
    {
        let path = scratch.path("stderr-\(UUID().uuidString)")
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        var status = stat()
        #expect(stat(path, &status) == 0)
        var environment = environment
        environment["JOURNAL_STREAM"] = asJournal ? "\(status.st_dev):\(status.st_ino)" : "\(status.st_dev):1"
        // Standard error is that very file (its device and inode are what JOURNAL_STREAM names).
        let process = try EndpointProcess(
            arguments, environment: environment, standardError: URL(fileURLWithPath: path)
        ).process
        process.waitUntilExit()
        return (process.terminationStatus, try String(contentsOfFile: path, encoding: .utf8))
    }

    @Test("on the journal's stream each line starts with its syslog priority; anywhere else plain JSON")
    func journalPriorityPrefix() throws {
        let scratch = try Scratch()
        var refused = scratch.environment
        refused["SIWA_WORKERS"] = "many"
        let error = try Self.runToFile(["serve", "--check"], environment: refused, asJournal: true, in: scratch)
        #expect(error.status == 2)
        #expect(error.standardError.hasPrefix(#"<3>{"time":""#), "\(error.standardError)")
        #expect(error.standardError.contains(#""event":"configuration_invalid","setting":"SIWA_WORKERS""#))
        #expect(error.standardError.split(separator: "\n").count == 1)

        var unknown = scratch.environment
        unknown["SIWA_NOT_A_SETTING"] = "1"
        let warning = try Self.runToFile(["serve", "--check"], environment: unknown, asJournal: true, in: scratch)
        #expect(warning.status == 0)
        #expect(warning.standardError.hasPrefix(#"<4>{"time":""#), "\(warning.standardError)")
        #expect(warning.standardError.contains(#""event":"unknown_setting""#))

        let elsewhere = try Self.runToFile(["serve", "--check"], environment: refused, asJournal: false, in: scratch)
        #expect(elsewhere.status == 2)
        #expect(elsewhere.standardError.hasPrefix(#"{"time":""#), "\(elsewhere.standardError)")
    }

    @Test("the valid settings of these cases pass --check")
    func baselineIsValid() throws {
        let scratch = try Scratch()
        let outcome = try Self.run(["serve", "--check"], environment: scratch.environment)
        #expect(outcome.status == 0, "\(outcome.standardError)")
        // One JSON line saying whose view of the files was checked (the unit's user may differ).
        let lines = outcome.standardOutput.split(separator: "\n")
        #expect(lines.count == 1)
        let line = try #require(
            try JSONSerialization.jsonObject(with: Data((lines.first ?? "").utf8)) as? [String: Any])
        #expect(line["event"] as? String == "configuration_valid")
        #expect(line["level"] as? String == "info")
        let user = try #require(getpwuid(geteuid())).pointee.pw_name.map { String(cString: $0) }
        #expect(line["checked_as"] as? String == user)
    }

    /// Start-up refusals after the settings table and the host checks, each made by a spool
    /// serve cannot open (its replay position, a waiting segment, a leftover of `rejected/`
    /// it must settle). The names are the spool's layout (`docs/operations.md`).
    static let startUpCases: [(name: String, setting: String, setUp: @Sendable (String) throws -> Void)] = [
        ("a replay position that is a directory", "SIWA_SPOOL_DIR", { try makeDirectory($0 + "/replay-position") }),
        (
            "a damaged replay position", "SIWA_SPOOL_DIR",
            {
                _ = FileManager.default.createFile(
                    atPath: $0 + "/replay-position", contents: Data(repeating: 65, count: 64))
            }
        ),
        (
            "a waiting segment that cannot be read (a directory)", "SIWA_SPOOL_DIR",
            { try makeDirectory($0 + "/segment-00000000000000000001.log") }
        ),
        (
            "a leftover in rejected/ that cannot be settled (a directory)", "SIWA_SPOOL_DIR",
            { try makeDirectory($0 + "/rejected/record-00000000000000000001-1-1.log.tmp") }
        ),
        (
            "rejected/ is a regular file", "SIWA_SPOOL_DIR",
            { _ = FileManager.default.createFile(atPath: $0 + "/rejected", contents: Data("x".utf8)) }
        ),
    ]

    static func makeDirectory(_ path: String) throws {
        try FileManager.default.createDirectory(
            atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    /// The refusal line's event and setting (and nothing of the time or the message's paths).
    static func refusal(_ outcome: Outcome) -> [String: String] {
        let line = outcome.standardError.split(separator: "\n").last.map(String.init) ?? ""
        let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]) ?? [:]
        return object.compactMapValues { $0 as? String }.filter { $0.key == "event" || $0.key == "setting" }
    }

    @Test(
        "each start-up refusal of serve before it listens is --check's too: exit 2, the same event and setting",
        arguments: 0..<startUpCases.count)
    func startUpRefusedAlike(_ index: Int) throws {
        let (name, setting, setUp) = Self.startUpCases[index]
        var refusals: [[String: String]] = []
        for arguments in [["serve", "--check"], ["serve"]] {
            // A fresh setup for each: serve may settle what it can, --check must not need to.
            let scratch = try Scratch()
            try Self.makeDirectory(scratch.path("spool"))
            try setUp(scratch.path("spool"))
            let outcome = try Self.run(arguments, environment: scratch.environment)
            Self.expectRefused(outcome, setting: setting, alone: false, "\(arguments.joined(separator: " ")): \(name)")
            refusals.append(Self.refusal(outcome))
        }
        #expect(refusals[0] == ["event": "configuration_invalid", "setting": setting], "\(name)")
        #expect(refusals[0] == refusals[1], "\(name)")
    }

    /// The refusal of a spool serve could not open is --check's too, the same line, and
    /// --check changes nothing in the spool.
    @Test("a damaged replay-position: serve --check and serve exit 2 with the same refusal line")
    func damagedReplayPosition() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(
            atPath: scratch.path("spool"), withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let damaged = Data(repeating: UInt8(ascii: "A"), count: 128)
        _ = FileManager.default.createFile(atPath: scratch.path("spool/replay-position"), contents: damaged)
        var refusals: [[String: String]] = []
        for arguments in [["serve", "--check"], ["serve"]] {
            let outcome = try Self.run(arguments, environment: scratch.environment)
            let name = arguments.joined(separator: " ")
            Self.expectRefused(outcome, setting: "SIWA_SPOOL_DIR", alone: false, name)
            let line = outcome.standardError.split(separator: "\n").last.map(String.init) ?? ""
            let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]) ?? [:]
            refusals.append(object.compactMapValues { $0 as? String }.filter { $0.key != "time" })
            // The settings check makes `rejected/` as it makes the spool directory; nothing else is made.
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: scratch.path("spool")).sorted()
                    == ["rejected", "replay-position"], "\(name) created no segment")
            #expect(FileManager.default.contents(atPath: scratch.path("spool/replay-position")) == damaged, "\(name)")
        }
        #expect(refusals.count == 2)
        #expect(refusals.first == refusals.last)
        #expect(
            refusals.first?["message"]?.hasPrefix("SIWA_SPOOL_DIR cannot be opened: spool_position_unreadable: ")
                == true)
    }

    @Test("a TCP port already taken stops serve with the setting named, before started")
    func portInUse() throws {
        let scratch = try Scratch()
        // Hold a loopback port, listening, so serve's bind fails.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                guard bind(fd, raw, length) == 0, listen(fd, 1) == 0, getsockname(fd, raw, &length) == 0 else {
                    throw POSIXError(.EADDRINUSE)
                }
            }
        }
        var environment = scratch.environment
        environment["SIWA_FCGI_SOCKET"] = "127.0.0.1:\(UInt16(bigEndian: address.sin_port))"
        Self.expectRefused(
            try Self.run(["serve"], environment: environment), setting: "SIWA_FCGI_SOCKET", alone: false, "port in use")
    }

    @Test("--check creates a missing spool directory with the mode serve gives it (0700)")
    func checkMakesTheSpoolAsServeDoes() throws {
        let scratch = try Scratch()
        let outcome = try Self.run(["serve", "--check"], environment: scratch.environment)
        #expect(outcome.status == 0, "\(outcome.standardError)")
        let attributes = try FileManager.default.attributesOfItem(atPath: scratch.path("spool"))
        #expect(attributes[.posixPermissions] as? Int == 0o700)
        let rejected = try FileManager.default.attributesOfItem(atPath: scratch.path("spool/rejected"))
        #expect(rejected[.posixPermissions] as? Int == 0o700)
    }

    @Test("--check --offline asks no Redis (a loopback listener gets no connection); --check alone asks it")
    func offlineTouchesNoNetwork() throws {
        let scratch = try Scratch()
        // A loopback listener standing where Redis would be: it only counts connections.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                guard bind(fd, raw, length) == 0, listen(fd, 8) == 0, getsockname(fd, raw, &length) == 0 else {
                    throw POSIXError(.EADDRINUSE)
                }
            }
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        /// Takes every connection waiting; how many there were.
        func connectionsTaken() -> Int {
            var count = 0
            while count < 100 {
                let accepted = accept(fd, nil, nil)
                guard accepted >= 0 else { break }
                close(accepted)
                count += 1
            }
            return count
        }
        var environment = scratch.environment
        environment["SIWA_REDIS_URL"] = "redis://127.0.0.1:\(UInt16(bigEndian: address.sin_port))/0"
        environment["SIWA_REDIS_TIMEOUT_MS"] = "200"

        let offline = try Self.run(["serve", "--check", "--offline"], environment: environment)
        #expect(offline.status == 0, "\(offline.standardError)")
        #expect(offline.standardOutput.contains(#""event":"configuration_valid""#))
        #expect(connectionsTaken() == 0, "--offline connected to the Redis address")

        // The same check online connects (and finds no Redis answering: an outage, not a refusal).
        let online = try Self.run(["serve", "--check"], environment: environment)
        #expect(online.status == 0, "\(online.standardError)")
        #expect(connectionsTaken() >= 1, "--check did not ask Redis: the offline count proves nothing")
    }

    @Test("--offline without --check is a usage error")
    func offlineNeedsCheck() throws {
        let scratch = try Scratch()
        let outcome = try Self.run(["serve", "--offline"], environment: scratch.environment)
        #expect(outcome.status == 2, "\(outcome.standardError)")
        #expect(outcome.standardError == "siwa-endpoint serve: --offline goes with --check\n")
    }
}
