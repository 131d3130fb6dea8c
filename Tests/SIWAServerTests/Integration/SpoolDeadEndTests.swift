import Foundation
import Glibc
import SIWATestKit
import SIWAVerification
import Synchronization
import Testing

@testable import SIWAJSON
@testable import SIWARedis

/// No silent dead ends: a Redis that answers but refuses, a full disk, a long spool at
/// start, a record that reads back damaged. The real `serve` binary against a real
/// redis-server (with ACL users, `maxclients`, a tmpfs of 128 KiB); the test kit's key
/// stands in for Apple's.
@Suite("Spool dead ends, end to end", .serialized)
struct SpoolDeadEndTests {
    /// `spool status` on a directory, as a dictionary of its JSON members.
    static func spoolStatus(_ directory: String) throws -> [String: String] {
        let result = try CommandRun.endpoint(["spool", "status", "--spool-dir", directory], environment: [:])
        try #require(result.status == 0, "spool status failed: \(result.errors)")
        guard case .object(let members) = try StrictJSONParser.parse(Array(result.output.utf8)) else { return [:] }
        return members.mapValues {
            switch $0 {
            case .integer(let number): String(number)
            case .string(let text): text
            case .null: "null"
            default: "?"
            }
        }
    }

    /// Settings that pass the checks before Redis's (the socket's directory, the spool), in
    /// a directory of the test's own, so the Redis check is what decides.
    /// The directory is removed when the test process exits (its callers keep only the
    /// environment; a serve they start may still be using it when they return).
    static func serveEnvironment(redisURL: String) -> [String: String] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "siwa-start-check-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        StartCheckDirectories.removeAtExit(directory)
        return [
            "SIWA_CLIENT_IDS": ServeStack.clientID, "SIWA_REDIS_URL": redisURL, "SIWA_REDIS_TIMEOUT_MS": "500",
            "SIWA_FCGI_SOCKET": directory.appendingPathComponent("fcgi.sock").path,
            "SIWA_SPOOL_DIR": directory.appendingPathComponent("spool").path,
            "SIWA_JWKS_CACHE": directory.appendingPathComponent("jwks.json").path,
        ]
    }

    // MARK: - A Redis that answers but refuses: at start

    /// Each refusal stops serve before anything else with exit 2 and one JSON line naming
    /// SIWA_REDIS_URL and what is missing (the only line it writes), and never the password.
    @Test("at start: wrong password, no password, a user without script or channel rights, a database out of range")
    func startRefusesARedisThatRefuses() throws {
        let redis = try RedisServerProcess(password: "test-fixture-redis-password")
        defer { redis.shutdown() }
        let admin = RedisConnection(endpoint: try RedisEndpoint(parsing: redis.url()))
        // The issue's reproduction: PING and reads, no scripts.
        _ = try admin.command("ACL", "SETUSER", "ro", "on", ">ro-fixture-password", "~*", "+@read", "+ping")
        // Everything but the channel: Redis 7 gives a new user no channels.
        _ = try admin.command(
            "ACL", "SETUSER", "nochannel", "on", ">nochannel-fixture-password", "~*", "+@all", "resetchannels")
        let port = redis.port
        let cases: [(name: String, url: String, cause: String)] = [
            ("wrong password", "redis://:not-the-password@127.0.0.1:\(port)/0", "WRONGPASS"),
            ("no password", "redis://127.0.0.1:\(port)/0", "NOAUTH"),
            ("no script rights", "redis://ro:ro-fixture-password@127.0.0.1:\(port)/0", "NOPERM"),
            ("no channel rights", "redis://nochannel:nochannel-fixture-password@127.0.0.1:\(port)/0", "PUBLISH"),
            ("database 99", redis.url(database: 99), "DB index is out of range"),
        ]
        for (name, url, cause) in cases {
            let result = try CommandRun.endpoint(["serve"], environment: Self.serveEnvironment(redisURL: url))
            #expect(result.status == 2, "\(name)")
            // Exactly one line in all, a JSON object: no plain-text line beside it.
            #expect(result.output.isEmpty, "\(name): \(result.output)")
            let lines = result.errors.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.isEmpty }
            #expect(lines.count == 1, "\(name): \(result.errors)")
            let line = String(lines.first ?? "")
            guard case .object(let members)? = try? StrictJSONParser.parse(Array(line.utf8)) else {
                Issue.record("\(name): not one JSON object: \(result.errors)")
                continue
            }
            #expect(members["event"] == .string("configuration_invalid"), "\(name)")
            #expect(members["setting"] == .string("SIWA_REDIS_URL"), "\(name)")
            #expect(line.contains(cause), "\(name): \(line)")
            #expect(!result.errors.contains("fixture-password"), "\(name)")
            #expect(!result.errors.contains(#""event":"started""#), "\(name)")
        }
        // Nothing was written by any check.
        #expect(try admin.command("DBSIZE").integer == 0)
    }

    /// A Redis that does not answer at all is an outage, not a mistake: serve starts and spools.
    @Test("at start: an unreachable Redis still lets serve start, and it spools")
    func startWithRedisDownStillServes() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        stack.redis.stop()
        try stack.startServe()
        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "000020.a.0001"))
        #expect(response.bodyText == #"{"status":"spooled"}"#)
        #expect(stack.serve?.logLines(event: "redis_unavailable_at_start").count == 1)
    }

    // MARK: - A Redis that answers but refuses: at run time

    /// The issue's reproduction: a user that may PING and read but not run scripts. Every
    /// notification is spooled and stays queued, in order; /healthz is 503 naming the
    /// cause; nothing is set aside; once the right is back, each is applied once.
    @Test("at run time: NOPERM keeps every record queued, /healthz 503 names it, then all apply once")
    func noPermissionKeepsRecordsQueued() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let admin = stack.redisConnection()
        _ = try admin.command(
            "ACL", "SETUSER", "siwa", "on", ">siwa-fixture-password", "~*", "&*", "+@all")
        stack.serveRedisURL = "redis://siwa:siwa-fixture-password@127.0.0.1:\(stack.redis.port)/0"
        try stack.startServe()
        // The right to run scripts is taken away while serve runs.
        _ = try admin.command("ACL", "SETUSER", "siwa", "-@scripting")
        let subs = (1...20).map { String(format: "000021.b.%04d", $0) }
        for sub in subs {
            let response = try stack.post(try stack.body(type: "consent-revoked", sub: sub))
            #expect(response.bodyText == #"{"status":"spooled"}"#)
        }
        #expect(
            try stack.waitUntil(timeout: 15) {
                let health = try stack.health()
                return health.status == 503 && (health.jsonFields["reason"] ?? "").contains("NOPERM")
            })
        let health = try stack.health()
        #expect(health.jsonFields["spool_depth"] == "20")
        #expect(health.jsonFields["redis"] == "ok")
        #expect(stack.serve?.logLines(event: "spool_replay_blocked").first?.contains("NOPERM") == true)
        let status = try Self.spoolStatus(stack.spoolDirectory)
        #expect(status["depth"] == "20")
        #expect(status["rejected"] == "0")
        #expect(status["torn_files"] == "0")
        #expect(Int(status["oldest_age_seconds"] ?? "") != nil)
        #expect(try stack.redisSnapshot() == [])

        _ = try admin.command("ACL", "SETUSER", "siwa", "+@scripting")
        #expect(try stack.waitUntil(timeout: 15) { try stack.streamLength() == 20 })
        #expect(try stack.waitUntil(timeout: 10) { try stack.health().status == 200 })
        for sub in subs { #expect(try stack.userHash(sub: sub)["last_event_type"] == "consent-revoked") }
        // The passes' lines, once they account for all twenty.
        let serve = try #require(stack.serve)
        #expect(stack.waitUntil(timeout: 10) { serve.replayedTotal("applied") >= 20 })
        #expect(serve.replayedTotal("applied") == 20)
        #expect(serve.logLines(event: "spool_replayed").allSatisfy { $0.contains(#""rejected":0"#) })
        #expect(stack.waitUntil(timeout: 10) { (try? Self.spoolStatus(stack.spoolDirectory)["depth"]) == "0" })
        #expect(try stack.request("GET", "/metrics").bodyText.contains("siwa_spool_rejected_total 0\n"))
    }

    /// Issue 13's reproduction: records spooled, then a restart against a Redis at
    /// `maxclients`. They stay queued (not set aside, not logged as applied) until Redis
    /// takes connections again.
    @Test("a restart against a Redis at maxclients: records stay queued, then apply; counts say what happened")
    func maxClientsAtStartKeepsRecordsQueued() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        stack.redis.kill()
        for index in 1...2 {
            let response = try stack.post(try stack.body(type: "consent-revoked", sub: "000022.c.000\(index)"))
            #expect(response.bodyText == #"{"status":"spooled"}"#)
        }
        stack.serve?.kill()
        try stack.redis.start()
        // This test's connection is the one client allowed: every other gets
        // "ERR max number of clients reached".
        let holder = stack.redisConnection()
        _ = try holder.command("CONFIG", "SET", "maxclients", "1")
        try stack.startServe()
        #expect(
            stack.waitUntil(timeout: 15) {
                (stack.serve?.logLines(event: "spool_replay_blocked").first ?? "").contains("max number of clients")
            })
        let health = try stack.health()
        #expect(health.status == 503)
        #expect((health.jsonFields["reason"] ?? "").contains("max number of clients"))
        #expect(health.jsonFields["spool_depth"] == "2")
        #expect(stack.serve?.logLines(event: "spool_replayed") == [])
        #expect(stack.serve?.logLines(event: "spool_record_rejected") == [])
        #expect(try Self.spoolStatus(stack.spoolDirectory)["rejected"] == "0")

        _ = try holder.command("CONFIG", "SET", "maxclients", "10000")
        #expect(try stack.waitUntil(timeout: 15) { try stack.streamLength() == 2 })
        #expect(try stack.waitUntil(timeout: 10) { try stack.health().status == 200 })
        let serve = try #require(stack.serve)
        #expect(stack.waitUntil(timeout: 10) { serve.replayedTotal("applied") >= 2 })
        #expect(serve.replayedTotal("applied") == 2)
        #expect(stack.serve?.logLines(event: "spool_record_rejected") == [])
    }

    static func integerField(_ name: String, in line: String) -> Int? {
        guard case .object(let members)? = try? StrictJSONParser.parse(Array(line.utf8)),
            case .integer(let value)? = members[name]
        else { return nil }
        return Int(value)
    }
}

/// The directories `SpoolDeadEndTests.serveEnvironment` made, removed at the process's exit.
enum StartCheckDirectories {
    private static let made = Mutex<[String]>([])
    private static let registered: Void = {
        atexit {
            for path in StartCheckDirectories.made.withLock({ $0 }) {
                try? FileManager.default.removeItem(atPath: path)
            }
        }
    }()

    static func removeAtExit(_ directory: URL) {
        _ = registered
        made.withLock { $0.append(directory.path) }
    }
}
