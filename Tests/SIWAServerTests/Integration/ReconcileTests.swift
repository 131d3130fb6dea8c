import Foundation
import SIWAJSON
import SIWAVerification
import Testing

/// `siwa-endpoint reconcile` end to end: the real binary, a real redis-server, and a
/// stand-in for Apple's token endpoint over HTTPS under a test CA (Apple cannot be
/// reached from a test; the stand-in checks the ES256 client secret exactly).
@Suite("reconcile against a stand-in for Apple's token endpoint", .serialized)
struct ReconcileTests {
    static let client = ReconcileStack.clientID

    func line(_ sub: String, _ token: String) -> String {
        JSONWriter.object([
            ("client_id", .string(Self.client)), ("sub", .string(sub)), ("refresh_token", .string(token)),
        ])
    }

    /// The JSON log lines of standard error, each as its members (strings and integers as text).
    func logLines(_ text: String) -> [[String: String]] {
        text.split(separator: "\n").compactMap { line in
            guard case .object(let members)? = try? StrictJSONParser.parse(Array(line.utf8)) else { return nil }
            return members.compactMapValues {
                switch $0 {
                case .string(let value): value
                case .integer(let value): String(value)
                case .bool(let value): value ? "true" : "false"
                default: nil
                }
            }
        }
    }

    /// The contract's Python reader (examples/python/siwa_state.py, docs/contract.md): is a session that began at `startedAt` valid?
    func readerSaysValid(_ stack: ReconcileStack, sub: String, startedAt: Int64) throws -> Bool {
        let output = try ExampleReaderTests.Reader.python.run(
            "state",
            [
                "--redis-url", stack.redis.url(), "--client-id", Self.client, "--sub", sub, "--session-started-at",
                String(startedAt),
            ])
        guard case .object(let members) = try StrictJSONParser.parse(Array(output.utf8)),
            case .bool(let valid)? = members["session_valid"]
        else { throw TestCertificateAuthority.Failure(description: "the reader printed no session_valid") }
        return valid
    }

    @Test("refused users' sessions end (a reader sees it), valid users change nothing, retries end as unknown")
    func mixedRun() throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let valid = stack.token("valid", .valid)
        let refused = stack.token("refused", .refused)
        let failing = stack.token("failing", .error500)
        let stalling = stack.token("stalling", .stall)
        let flaky = stack.token("flaky", .error500Once)
        let alreadyRevoked = stack.token("already-revoked", .refused)
        let malformedToken = "rt.malformed.\(UUID().uuidString)"
        try stack.startStandin()

        // A revocation Apple sent, later than this run's check: reconcile must not move it back.
        let future = Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000
        _ = try stack.redisConnection().command(
            "HSET", "siwa:user:{\(Self.client):000001.g}", "sessions_revoked_at", String(future), "consent_revoked_at",
            String(future))
        let subscriber = try RedisTestSubscriber(port: stack.redis.port, channel: "siwa:notifications")

        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let result = try stack.reconcile([
            line("000001.a", valid),
            line("000001.b", refused),
            "not json \(malformedToken)",
            line("000001.c", failing),
            #"{"client_id": "com.example.app", "sub": "000001.x"}"#,
            line("000001.d", stalling),
            line("000001.e", flaky),
            "",
            line("000001.g", alreadyRevoked),
            #"{"client_id": "com.example.app", "sub": "bad{sub}", "refresh_token": "\#(malformedToken)"}"#,
        ])
        let after = Int64(Date().timeIntervalSince1970 * 1000)

        #expect(result.status == 1, "some users stayed unknown: \(result.errors)")
        #expect(
            result.output
                == "reconcile: checked=6 still_valid=2 refused=2 skipped=0 unknown=2 malformed=3\n")
        let log = logLines(result.errors)
        #expect(
            log.filter { $0["event"] == "reconcile_line_malformed" }.map { [$0["line"] ?? "", $0["reason"] ?? ""] }
                == [["3", "not_json"], ["5", "refresh_token_missing"], ["10", "sub_invalid"]])
        // The log names the input line, never the user's `sub` (the privacy table).
        #expect(
            log.filter { $0["event"] == "reconcile_unknown" }.map { [$0["line"] ?? "", $0["reason"] ?? ""] }
                == [["4", "http_500"], ["6", "timed_out"]])
        #expect(log.allSatisfy { $0["sub"] == nil })

        // Every attempt reached the stand-in with a client secret it accepted; 500 and
        // the stall were tried three times, the flaky one twice.
        #expect(try stack.standinRequests().allSatisfy { $0.problem == nil })
        #expect(
            try stack.requestCounts()
                == ["valid": 1, "refused": 1, "failing": 3, "stalling": 3, "flaky": 2, "already-revoked": 1])

        // The refused user: sessions end at the check time; consent and deletion are not claimed.
        let refusedState = try stack.userHash(sub: "000001.b")
        let revokedAt = try #require(refusedState["sessions_revoked_at"].flatMap { Int64($0) })
        #expect(revokedAt >= before && revokedAt <= after)
        #expect(
            refusedState == [
                "sessions_revoked_at": String(revokedAt), "refresh_token_refused_at": String(revokedAt),
                "updated_at": String(revokedAt),
            ])
        #expect(try readerSaysValid(stack, sub: "000001.b", startedAt: before - 1) == false)
        #expect(try readerSaysValid(stack, sub: "000001.b", startedAt: revokedAt + 1) == true)

        // Valid users: no user state at all; a reader's session stays valid.
        #expect(try stack.userHash(sub: "000001.a").isEmpty)
        #expect(try stack.userHash(sub: "000001.e").isEmpty)
        #expect(try readerSaysValid(stack, sub: "000001.a", startedAt: before - 1) == true)

        // Never backwards: the later revocation Apple sent stays.
        let kept = try stack.userHash(sub: "000001.g")
        #expect(kept["sessions_revoked_at"] == String(future))
        #expect(kept["consent_revoked_at"] == String(future))
        #expect(kept["account_deleted_at"] == nil)

        // Stream and channel: their own type, marked as found by reconciliation.
        #expect(
            try stack.streamEntries() == [
                [
                    "provider": "apple", "client_id": Self.client, "sub": "000001.b",
                    "type": "reconciled-sessions-revoked",
                    "event_time": String(revokedAt), "applied": "1", "source": "reconcile",
                ],
                [
                    "provider": "apple", "client_id": Self.client, "sub": "000001.g",
                    "type": "reconciled-sessions-revoked",
                    "event_time": kept["refresh_token_refused_at"] ?? "?", "applied": "0", "source": "reconcile",
                ],
            ])
        let messages = try subscriber.messages(within: 5, limit: 2)
        #expect(messages.count == 2)
        #expect(
            messages.first
                == #"{"provider":"apple","client_id":"com.example.app","sub":"000001.b","type":"reconciled-sessions-revoked","event_time":\#(revokedAt),"source":"reconcile","applied":true}"#
        )

        // Decided users carry a check marker that expires within a day; unknown ones none.
        let connection = stack.redisConnection()
        for sub in ["000001.a", "000001.b", "000001.e", "000001.g"] {
            let ttl = try connection.command("PTTL", "siwa:reconciled:{\(Self.client):\(sub)}").integer ?? -2
            #expect(ttl > 0 && ttl <= 86_400_000, "\(sub)")
        }
        for sub in ["000001.c", "000001.d"] {
            #expect(try connection.command("EXISTS", "siwa:reconciled:{\(Self.client):\(sub)}").integer == 0)
        }

        // No refresh token, and no client secret (a JWT starts "eyJ"), in any output or in Redis.
        let everything = result.output + result.errors + (try stack.redisDump())
        for secret in [valid, refused, failing, stalling, flaky, alreadyRevoked, malformedToken, "eyJ"] {
            #expect(!everything.contains(secret))
        }
    }

    @Test("once a day: a second run skips every user decided in the first, and asks Apple nothing for them")
    func onceADay() throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let valid = stack.token("valid", .valid)
        let refused = stack.token("refused", .refused)
        let failing = stack.token("failing", .error500)
        let newcomer = stack.token("newcomer", .valid)
        try stack.startStandin()
        let users = [line("000002.a", valid), line("000002.b", refused), line("000002.c", failing)]

        let first = try stack.reconcile(users, overriding: ["SIWA_APPLE_ATTEMPTS": "1"])
        #expect(first.status == 1)
        #expect(
            first.output == "reconcile: checked=3 still_valid=1 refused=1 skipped=0 unknown=1 malformed=0\n")
        let revokedAt = try stack.userHash(sub: "000002.b")["sessions_revoked_at"]
        #expect(revokedAt != nil)

        let second = try stack.reconcile(users + [line("000002.n", newcomer)], overriding: ["SIWA_APPLE_ATTEMPTS": "1"])
        // The unknown user is asked again (nothing was decided for it); the others are skipped.
        #expect(second.status == 1)
        #expect(
            second.output == "reconcile: checked=2 still_valid=1 refused=0 skipped=2 unknown=1 malformed=0\n")
        #expect(try stack.requestCounts() == ["valid": 1, "refused": 1, "failing": 2, "newcomer": 1])
        #expect(try stack.userHash(sub: "000002.b")["sessions_revoked_at"] == revokedAt)
        #expect(try stack.streamEntries().count == 1)
    }

    @Test("Apple answering 429 to every request: the run stops after one user's ten 429s, says so, asks no other user")
    func endlessThrottlingStopsTheRun() throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let tokens = (0..<3).map { stack.token("throttled\($0)", .throttle) }
        stack.standinArguments = ["--retry-after-seconds", "1"]
        try stack.startStandin()
        let started = ContinuousClock.now
        let run = try stack.reconcile(tokens.enumerated().map { line("000009.\($0.offset)", $0.element) })
        // Without the stop, each user meets its ten 429s and the pace halves at each: minutes.
        #expect(!run.timedOut && ContinuousClock.now - started < .seconds(45))
        #expect(run.status == 1, "\(run.errors)")
        #expect(run.errors.contains("Apple answered 429 (too many requests) 10 times in a row at line 1"))
        #expect(try stack.requestCounts() == ["throttled0": 10], "no other user is asked")
    }

    @Test(
        "a wrong key or team ID is refused by Apple (invalid_client): a configuration error, no user refused",
        arguments: ["key", "team"])
    func invalidClient(wrong: String) throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let first = stack.token("first", .refused)
        let second = stack.token("second", .refused)
        try stack.startStandin()
        let override =
            wrong == "key"
            ? ["SIWA_APPLE_PRIVATE_KEY_FILE": stack.wrongKeyPath] : ["SIWA_APPLE_TEAM_ID": "OTHERTEAM1"]
        let result = try stack.reconcile([line("000003.a", first), line("000003.b", second)], overriding: override)

        #expect(result.status == 2)
        #expect(
            result.output == "reconcile: checked=0 still_valid=0 refused=0 skipped=0 unknown=0 malformed=0\n")
        #expect(
            result.errors.contains("Apple refused the client (invalid_client) for client ID com.example.app"))
        #expect(
            try stack.standinRequests()
                == [.init(label: "first", answer: "invalid_client", problem: wrong == "key" ? "signature" : "iss")])
        // Nothing written: no user state, no marker, no stream entry.
        #expect(try stack.redisDump().isEmpty)
        #expect(!(result.output + result.errors).contains(first))
    }

    @Test(
        "bad settings stop the run before any request, naming the setting",
        arguments: [
            ("SIWA_APPLE_TEAM_ID", "team"), ("SIWA_APPLE_KEY_ID", ""),
            ("SIWA_APPLE_PRIVATE_KEY_FILE", "/nonexistent.p8"),
            ("SIWA_APPLE_PRIVATE_KEY_FILE", "RSA"), ("SIWA_APPLE_TOKEN_URL", "http://appleid.apple.com/auth/token"),
            ("SIWA_APPLE_CA_FILE", "/nonexistent/ca.pem"), ("SIWA_APPLE_ATTEMPTS", "0"), ("SIWA_REDIS_URL", "http://x"),
        ])
    func badSettings(setting: String, value: String) throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let token = stack.token("a", .valid)
        try stack.startStandin()
        // The test CA's RSA server key: a PEM private key, but not EC P-256.
        let actual = value == "RSA" ? stack.authority.serverKeyPath : value
        let result = try stack.reconcile([line("000004.a", token)], overriding: [setting: actual])
        #expect(result.status == 2)
        // Serve's one refusal line, naming the setting, and nothing beside it.
        let lines = result.errors.split(separator: "\n")
        #expect(lines.count == 1, "\(result.errors)")
        #expect(lines.first?.contains(#""event":"configuration_invalid","setting":"\#(setting)""#) == true)
        #expect(lines.first?.contains(#""message":"\#(setting) "#) == true, "\(result.errors)")
        #expect(try stack.standinRequests().isEmpty)
        #expect(try stack.redisDump().isEmpty)
    }
}
