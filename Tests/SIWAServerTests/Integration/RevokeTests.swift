import Foundation
import SIWAJSON
import SIWARedis
import SIWAStore
import SIWAVerification
import Testing

/// `siwa-endpoint revoke` end to end: the real binary, a real redis-server, and the
/// stand-in for Apple's token endpoints over HTTPS under a test CA (Apple cannot be reached
/// from a test; the stand-in checks the ES256 client secret and the revocation form exactly).
@Suite("revoke against a stand-in for Apple's /auth/revoke", .serialized)
struct RevokeTests {
    static let client = ReconcileStack.clientID

    func line(_ sub: String, _ token: String, kind: String = "refresh_token") -> String {
        JSONWriter.object([("client_id", .string(Self.client)), ("sub", .string(sub)), (kind, .string(token))])
    }

    /// Standard output's JSON lines, each as its members (strings, integers, booleans as text).
    func outcomes(_ text: String) -> [[String: String]] {
        ReconcileTests().logLines(text)
    }

    @Test("Apple answering 429 to every request: the run stops after one user's ten 429s, says so, asks no other user")
    func endlessThrottlingStopsTheRun() throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let tokens = (0..<3).map { stack.token("throttled\($0)", .throttle) }
        stack.standinArguments = ["--retry-after-seconds", "1"]
        try stack.startStandin()
        let started = ContinuousClock.now
        let run = try stack.revoke(tokens.enumerated().map { line("000059.\($0.offset)", $0.element) })
        #expect(!run.timedOut && ContinuousClock.now - started < .seconds(45))
        #expect(run.status == 1, "\(run.errors)")
        let outcomes = outcomes(run.output)
        #expect(outcomes.map { $0["outcome"] ?? "" } == ["unknown"] && outcomes.first?["reason"] == "http_429")
        #expect(run.errors.contains("Apple answered 429 (too many requests) 10 times in a row at line 1"))
        #expect(try stack.requestCounts() == ["throttled0": 10], "no other user is asked")
    }

    @Test("each outcome: revoked (refresh or access token, after a retry too), refused with Apple's code, unknown")
    func everyOutcome() throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let refresh = stack.token("refresh", .valid)
        let access = stack.token("access", .valid)
        let refused = stack.token("refused", .refused)
        let flaky = stack.token("flaky", .error500Once)
        let failing = stack.token("failing", .error500)
        try stack.startStandin()
        let subscriber = try RedisTestSubscriber(port: stack.redis.port, channel: "siwa:notifications")

        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let run = try stack.revoke([
            line("000050.a", refresh), line("000050.b", access, kind: "access_token"), line("000050.c", refused),
            "not json \(refused)", line("000050.d", flaky), line("000050.e", failing),
        ])
        let after = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(run.status == 1, "a refused and an unknown user: a partial run")
        let lines = outcomes(run.output)
        #expect(lines.map { $0["sub"] ?? "" } == ["000050.a", "000050.b", "000050.c", "000050.d", "000050.e"])
        #expect(lines.map { $0["outcome"] ?? "" } == ["revoked", "revoked", "refused", "revoked", "unknown"])
        #expect(lines[2]["error"] == "invalid_grant")
        #expect(lines[4]["reason"] == "http_500")
        #expect(lines.map { $0["line"] ?? "" } == ["1", "2", "3", "5", "6"])
        #expect(ReconcileTests().logLines(run.errors).contains { $0["event"] == "revoke_line_malformed" })

        // Revoked users' sessions end at the revoke time, with an entry and a message of their own type.
        for (index, sub) in ["000050.a", "000050.b", "000050.d"].enumerated() {
            let hash = try stack.userHash(sub: sub)
            let revokedAt = try #require(Int64(lines[[0, 1, 3][index]]["revoked_at"] ?? ""))
            #expect(revokedAt >= before && revokedAt <= after)
            #expect(hash["sessions_revoked_at"] == String(revokedAt))
            #expect(hash["tokens_revoked_at"] == String(revokedAt))
            #expect(hash["updated_at"] == String(revokedAt))
            #expect(hash["consent_revoked_at"] == nil && hash["account_deleted_at"] == nil)
        }
        #expect(try stack.userHash(sub: "000050.c").isEmpty)
        #expect(try stack.userHash(sub: "000050.e").isEmpty)
        let entries = try stack.streamEntries()
        #expect(entries.map { $0["sub"] ?? "" } == ["000050.a", "000050.b", "000050.d"])
        #expect(
            entries.allSatisfy {
                $0["type"] == "app-revoked-tokens" && $0["source"] == "revoke" && $0["applied"] == "1"
                    && $0["jti"] == nil && $0["raw_type"] == nil
            })
        let messages = try subscriber.messages(within: 10, limit: 3)
        #expect(messages.count == 3)
        let first = try ExampleFiles.flatJSON(try #require(messages.first))
        #expect(
            first == [
                "provider": "apple", "client_id": Self.client, "sub": "000050.a", "type": "app-revoked-tokens",
                "event_time": lines[0]["revoked_at"] ?? "", "source": "revoke", "applied": "true",
            ])

        // What Apple received: the hint per token, retries as reconcile's rules say.
        let log = try stack.standinLog()
        #expect(log.allSatisfy { $0["endpoint"] == "revoke" })
        #expect(log.first { $0["label"] == "access" }?["hint"] == "access_token")
        #expect(log.first { $0["label"] == "refresh" }?["hint"] == "refresh_token")
        let counts = try stack.requestCounts()
        #expect(counts == ["refresh": 1, "access": 1, "refused": 1, "flaky": 2, "failing": 3])

        // No token anywhere: not in Redis, not on standard output, not in a log line.
        let dump = try stack.redisDump()
        for token in [refresh, access, refused, flaky, failing] {
            #expect(!dump.contains(token) && !run.output.contains(token) && !run.errors.contains(token))
        }
    }

    @Test("sessions only move forward: a later revocation stays; all revoked exits 0")
    func sessionsOnlyMoveForward() throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let token = stack.token("later", .valid)
        try stack.startStandin()
        let future = Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000
        _ = try stack.redisConnection().command(
            "HSET", "siwa:user:{\(Self.client):000051.a}", "sessions_revoked_at", String(future), "consent_revoked_at",
            String(future))
        let run = try stack.revoke([line("000051.a", token)])
        #expect(run.status == 0, "\(run.errors)")
        let outcome = try #require(outcomes(run.output).first)
        #expect(outcome["outcome"] == "revoked" && outcome["sessions_revoked_at_moved"] == "false")
        let hash = try stack.userHash(sub: "000051.a")
        #expect(hash["sessions_revoked_at"] == String(future))
        #expect(hash["tokens_revoked_at"] == outcome["revoked_at"])
        #expect(try stack.streamEntries().map { $0["applied"] ?? "" } == ["0"])
    }

    @Test("Apple's consent-revoked that follows a revocation records its time and moves nothing backwards")
    func consentRevokedAfterRevoke() throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let token = stack.token("deleting", .valid)
        try stack.startStandin()
        let run = try stack.revoke([line("000053.a", token)])
        #expect(run.status == 0, "\(run.errors)")
        let revokedAt = try #require(Int64(outcomes(run.output).first?["revoked_at"] ?? ""))
        // What the responder applies when Apple's notification arrives: event time a few
        // seconds before the revoke call returned.
        let store = NotificationStore(connection: stack.redisConnection())
        let eventTime = revokedAt - 5000
        let outcome = try store.apply(
            VerifiedNotification(
                clientID: Self.client, subject: "000053.a", type: .consentRevoked, rawType: "consent-revoked",
                eventTimeMilliseconds: eventTime, tokenID: "after-revoke", issuedAt: eventTime / 1000,
                expiresAt: eventTime / 1000 + 86_400, email: nil, isPrivateEmail: nil),
            receivedAt: revokedAt + 1000)
        #expect(outcome == .applied)
        let hash = try stack.userHash(sub: "000053.a")
        #expect(hash["sessions_revoked_at"] == String(revokedAt))
        #expect(hash["tokens_revoked_at"] == String(revokedAt))
        #expect(hash["consent_revoked_at"] == String(eventTime))
    }

    @Test("invalid_client: a configuration error, exit 2 at once; no further user is sent, nothing is written")
    func invalidClientStopsTheRun() throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let first = stack.token("first", .valid)
        let second = stack.token("second", .valid)
        try stack.startStandin()
        let run = try stack.revoke(
            [line("000052.a", first), line("000052.b", second)],
            overriding: ["SIWA_APPLE_PRIVATE_KEY_FILE": stack.wrongKeyPath])
        #expect(run.status == 2)
        #expect(
            run.errors.contains("Apple refused the client (invalid_client) for client ID com.example.app at line 1"))
        #expect(run.output.isEmpty)
        #expect(try stack.requestCounts() == ["first": 1])
        #expect(try stack.standinLog().first?["problem"] == "signature")
        #expect(try stack.redisDump().isEmpty)
        #expect(!run.errors.contains(first) && !run.errors.contains(second))
    }

    @Test("tokens are never arguments: a second positional is a usage error, exit 2")
    func tokenOnTheCommandLineIsRefused() throws {
        let run = try CommandRun.endpoint(["revoke", "-", "rt.secret-token"])
        #expect(run.status == 2)
        #expect(run.errors.contains("tokens are never arguments"))
        #expect(!run.errors.contains("rt.secret-token"))
    }
}
