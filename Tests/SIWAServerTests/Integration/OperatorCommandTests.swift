import Foundation
import SIWAStore
import SIWATestKit
import SIWAVerification
import Testing

/// `siwa-endpoint user`: what Redis holds for one user, read from state the real responder wrote.
@Suite("siwa-endpoint user", .serialized)
struct UserCommandTests {
    static let revokedAt: Int64 = 1_796_000_000_000  // 2026-11-30T00:53:20.000Z

    func user(_ stack: ServeStack, _ words: [String], environment: [String: String]? = nil) throws -> CommandRun {
        try CommandRun.endpoint(["user"] + words, environment: environment ?? ["SIWA_REDIS_URL": stack.redis.url()])
    }

    @Test("the hash with UTC dates, a session before or at the revocation is not valid, one after is")
    func consentRevoked() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let sub = "000020.u.0001"
        #expect(
            try stack.post(
                try stack.body(type: "consent-revoked", sub: sub, eventTimeMilliseconds: Self.revokedAt)
            ).status == 200)
        let atRevocation = try user(stack, [ServeStack.clientID, sub, "--session-started", String(Self.revokedAt)])
        #expect(atRevocation.status == 0, "\(atRevocation.errors)")
        let lines = atRevocation.lines
        #expect(lines.first == "key siwa:user:{com.example.app:000020.u.0001}")
        #expect(lines.contains("  sessions_revoked_at  1796000000000  2026-11-30T00:53:20.000Z"))
        #expect(lines.contains("  consent_revoked_at   1796000000000  2026-11-30T00:53:20.000Z"))
        #expect(lines.contains("  last_event_type      consent-revoked"))
        #expect(lines.contains("session started at 1796000000000  2026-11-30T00:53:20.000Z"))
        #expect(lines.contains("session not valid"))
        #expect(!lines.contains("session valid"))
        #expect(lines.contains("stream entries for this user among the newest 1000 of siwa:events: 1"))
        #expect(
            lines.contains {
                $0.hasPrefix("  ")
                    && $0.contains("consent-revoked  event_time=1796000000000 2026-11-30T00:53:20.000Z  applied=1")
            })

        let later = try user(stack, [ServeStack.clientID, sub, "--session-started", "2026-11-30T00:53:20.001Z"])
        #expect(later.status == 0)
        #expect(later.lines.contains("session valid"))
        #expect(!later.lines.contains("session not valid"))
        let offset = try user(stack, [ServeStack.clientID, sub, "--session-started", "2026-11-30T01:53:20+01:00"])
        #expect(offset.lines.contains("session not valid"))
    }

    @Test("no email address from the stream when the hash holds none; the hash's own is shown")
    func emailNeverBeyondTheHash() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let deleted = "000020.u.0002"
        let forwarding = "000020.u.0003"
        for (type, sub, time, email) in [
            ("email-disabled", deleted, Self.revokedAt, "gone@privaterelay.appleid.com"),
            ("account-deleted", deleted, Self.revokedAt + 1000, nil),
            ("email-enabled", forwarding, Self.revokedAt, "kept@privaterelay.appleid.com"),
        ] {
            #expect(
                try stack.post(
                    try stack.body(
                        type: type, sub: sub, eventTimeMilliseconds: time, email: email,
                        isPrivateEmail: email == nil ? nil : true)
                ).status == 200)
        }
        let gone = try user(stack, [ServeStack.clientID, deleted])
        #expect(gone.status == 0)
        #expect(!gone.output.contains("@"))
        #expect(!gone.output.contains("private"))
        #expect(gone.lines.contains("stream entries for this user among the newest 1000 of siwa:events: 2"))
        // The stream holds no address (the endpoint writes none there): nothing to hide.
        #expect(gone.lines.contains { $0.contains("email-disabled") && !$0.contains("email=") })
        #expect(gone.lines.contains { $0.contains("account-deleted") && $0.contains("applied=1") })
        #expect(!gone.lines.contains { $0.hasPrefix("session") })

        let kept = try user(stack, [ServeStack.clientID, forwarding])
        #expect(kept.lines.contains("  email                kept@privaterelay.appleid.com"))
        #expect(kept.output.components(separatedBy: "@").count == 2, "the address once, from the hash")
    }

    @Test("a refresh token reconcile found refused: its time with the UTC date, its entry marked source=reconcile")
    func reconcileEntry() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let sub = "000020.u.0006"
        #expect(
            try stack.post(
                try stack.body(type: "consent-revoked", sub: sub, eventTimeMilliseconds: Self.revokedAt)
            ).status == 200)
        // What a reconcile run writes when Apple refuses the user's refresh token, one second later.
        let checkedAt = Self.revokedAt + 1000
        #expect(
            try ReconcileStore(connection: stack.redisConnection()).record(
                clientID: ServeStack.clientID, subject: sub, refused: true, checkedAt: checkedAt))

        let shown = try user(stack, [ServeStack.clientID, sub])
        #expect(shown.status == 0, "\(shown.errors)")
        let lines = shown.lines
        #expect(lines.contains("  refresh_token_refused_at  1796000001000  2026-11-30T00:53:21.000Z"))
        #expect(lines.contains("  sessions_revoked_at       1796000001000  2026-11-30T00:53:21.000Z"))
        #expect(lines.contains("stream entries for this user among the newest 1000 of siwa:events: 2"))
        let entries = lines.filter { $0.hasPrefix("  ") && $0.contains(" received ") }
        #expect(entries.count == 2)
        // Apple's entry first: no source; then reconcile's, saying where it came from.
        #expect(entries.first?.contains("  consent-revoked  ") == true)
        #expect(entries.first?.contains("source=") == false)
        #expect(
            entries.last?.hasSuffix(
                "  reconciled-sessions-revoked  event_time=1796000001000 2026-11-30T00:53:21.000Z  applied=1"
                    + "  source=reconcile") == true, "\(entries)")
    }

    @Test("nothing held exits 1; --recent bounds the scan; settings from --env-file; Redis down exits 3")
    func boundsAndFailures() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let sub = "000020.u.0004"
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: sub)).status == 200)
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000020.u.0005")).status == 200)

        let nobody = try user(stack, [ServeStack.clientID, "000020.u.0404", "--session-started", "1796000000000"])
        #expect(nobody.status == 1)
        #expect(nobody.lines.contains("state: nothing held"))
        #expect(nobody.lines.contains("session valid"))
        #expect(nobody.lines.contains("stream entries for this user among the newest 1000 of siwa:events: 0"))

        // Only the newest entry is scanned: it is the other user's.
        let newestOnly = try user(stack, [ServeStack.clientID, sub, "--recent", "1"])
        #expect(newestOnly.status == 0)
        #expect(newestOnly.lines.contains("stream entries for this user among the newest 1 of siwa:events: 0"))
        #expect(try user(stack, [ServeStack.clientID, sub, "--recent", "0"]).status == 2)
        #expect(try user(stack, [ServeStack.clientID, sub, "--recent", "100001"]).status == 2)
        #expect(try user(stack, [ServeStack.clientID, sub, "--session-started", "1796000000"]).status == 2)
        #expect(try user(stack, [ServeStack.clientID, sub, "--session-started", "yesterday"]).status == 2)
        #expect(try user(stack, ["com.example:app", sub]).status == 2)
        #expect(try user(stack, [ServeStack.clientID]).status == 2)

        let envFile = stack.directory.appendingPathComponent("operator.env")
        try Data("SIWA_CLIENT_IDS=com.example.app\nSIWA_REDIS_URL=\(stack.redis.url())\n".utf8).write(to: envFile)
        let fromFile = try user(stack, [ServeStack.clientID, sub, "--env-file", envFile.path], environment: [:])
        #expect(fromFile.status == 0, "\(fromFile.errors)")
        #expect(fromFile.lines.contains { $0.hasPrefix("  sessions_revoked_at") })

        let badSetting = try user(stack, [ServeStack.clientID, sub], environment: ["SIWA_REDIS_TIMEOUT_MS": "0"])
        #expect(badSetting.status == 2)
        #expect(badSetting.errors.contains("SIWA_REDIS_TIMEOUT_MS"))

        stack.redis.stop()
        let down = try user(stack, [ServeStack.clientID, sub])
        #expect(down.status == 3)
        #expect(down.errors.contains("Redis"))
        #expect(down.output.isEmpty)
    }
}

/// `siwa-endpoint status`: the responder's health over its FastCGI socket, from a real serve.
@Suite("siwa-endpoint status", .serialized)
struct StatusCommandTests {
    @Test("healthy: a table or the /healthz document, exit 0; the socket from SIWA_FCGI_SOCKET")
    func healthy() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000021.s.0002")).status == 200)
        let table = try CommandRun.endpoint(["status", "--socket", stack.socketPath])
        #expect(table.status == 0, "\(table.errors)")
        #expect(
            Array(table.lines.prefix(6)) == [
                "socket       \(stack.socketPath)", "health       ok", "keys         1 of Apple's signing keys loaded",
                "redis        ok", "spool depth  0 notifications waiting for Redis", "",
            ])
        // Per client ID, from /metrics: the genuine one, the silent one, the unlisted aud.
        let app = try #require(table.lines.first { $0.hasPrefix("client com.example.app  ") })
        #expect(
            app.contains("  1 genuine since start; last 20") && app.hasSuffix("; alert after 7 d 0 h; refused: none"))
        let watch = try #require(table.lines.first { $0.hasPrefix("client com.example.watch  ") })
        #expect(
            watch.contains("  0 genuine since start; none yet (served for ")
                && watch.hasSuffix("; alert after 7 d 0 h; refused: none"))
        #expect(
            table.lines.suffix(2) == [
                "aud not listed            0 Apple-signed notifications refused for a client ID not in SIWA_CLIENT_IDS",
                "",
            ])
        let json = try CommandRun.endpoint(["status", "--json"], environment: ["SIWA_FCGI_SOCKET": stack.socketPath])
        #expect(json.status == 0)
        #expect(json.output == #"{"status":"ok","keys":1,"redis":"ok","spool_depth":0}"# + "\n")
    }

    @Test("Redis down: not healthy, exit 1, the spool depth and the reason shown")
    func unhealthy() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        stack.redis.stop()
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: "000021.s.0001")).jsonFields["status"]
                == "spooled")
        let table = try CommandRun.endpoint(["status", "--socket", stack.socketPath])
        #expect(table.status == 1)
        #expect(table.lines.contains("health       NOT HEALTHY (HTTP 503)"))
        #expect(table.lines.contains("redis        down"))
        #expect(table.lines.contains("spool depth  1 notifications waiting for Redis"))
        #expect(table.lines.contains("reason       Redis does not answer"))
        let json = try CommandRun.endpoint(["status", "--socket", stack.socketPath, "--json"])
        #expect(json.status == 1)
        // The breaker opened on the spooled request: its members follow the spool depth.
        #expect(
            json.output.hasPrefix(
                #"{"status":"unavailable","keys":1,"redis":"down","spool_depth":1,"redis_circuit":"open","#))
        #expect(json.output.hasSuffix(#","reason":"Redis does not answer"}"# + "\n"))
    }

    @Test("nothing listening exits 3; a bad --socket is a usage mistake")
    func noAnswer() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "siwa-status-\(UUID().uuidString)")
        let missing = try CommandRun.endpoint([
            "status", "--socket", directory.appendingPathComponent("none.sock").path,
        ])
        #expect(missing.status == 3)
        #expect(missing.output.isEmpty)
        #expect(missing.errors.contains("no answer"))
        #expect(try CommandRun.endpoint(["status", "--socket", "localhost"]).status == 2)
        #expect(try CommandRun.endpoint(["status", "--socket", "/x", "--timeout", "0"]).status == 2)
    }
}

/// `siwa-endpoint user` with serve's Sentinel settings reads the primary the sentinels name,
/// not the host of `SIWA_REDIS_URL` (which, with Sentinel, gives only the database).
@Suite("siwa-endpoint user, with Sentinel", .serialized)
struct UserCommandSentinelTests {
    @Test("the state is read from the primary the sentinels name; the URL's host is not used")
    func readsThePrimaryTheSentinelsName() throws {
        let cluster = try RedisSentinelCluster()
        defer { cluster.shutdown() }
        let primary = try #require(cluster.currentPrimary())
        let key = "siwa:user:{com.example.sentinel:000030.u.0001}"
        _ = try cluster.connection(port: primary.port).command(
            "HSET", key, "sessions_revoked_at", "1796000000000", "updated_at", "1796000000412")
        // A port nothing listens on: only the sentinels can lead the command to the data.
        let unused = try LoopbackPort.free()
        let run = try CommandRun.endpoint(
            ["user", "com.example.sentinel", "000030.u.0001", "--session-started", "1796000000000"],
            environment: [
                "SIWA_REDIS_URL": "redis://127.0.0.1:\(unused)/0", "SIWA_REDIS_SENTINELS": cluster.sentinelList,
                "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
            ])
        #expect(run.status == 0, "\(run.errors)")
        #expect(run.lines.contains("  sessions_revoked_at  1796000000000  2026-11-30T00:53:20.000Z"))
        #expect(run.lines.contains("session not valid"))
    }
}
