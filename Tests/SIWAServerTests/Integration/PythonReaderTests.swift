import Foundation
import SIWAJSON
import SIWAVerification
import Testing

/// The Python reader (redis-py) of docs/contract.md, run against state the real responder wrote:
/// "is this session still valid?" answered from the Redis contract alone.
@Suite("Python reader of the Redis contract", .serialized)
struct PythonReaderTests {
    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("examples/python/siwa_state.py").path

    /// scripts/test makes a virtualenv with redis-py in .build/test-venv and names its python in
    /// SIWA_TEST_PYTHON; without either, the system python3 (which needs redis-py installed).
    static let python: String = {
        if let named = ProcessInfo.processInfo.environment["SIWA_TEST_PYTHON"] { return named }
        let packageRoot = URL(fileURLWithPath: script).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let venv = packageRoot.appendingPathComponent(".build/test-venv/bin/python").path
        return FileManager.default.isExecutableFile(atPath: venv) ? venv : "/usr/bin/python3"
    }()

    func read(_ stack: ServeStack, sub: String, sessionStartedAt: Int64) throws -> [String: String] {
        let data = try run([
            Self.script, "--redis-url", stack.redis.url(), "--client-id", ServeStack.clientID, "--sub", sub,
            "--session-started-at", String(sessionStartedAt),
        ])
        guard case .object(let members) = try StrictJSONParser.parse(Array(data)) else { return [:] }
        return members.mapValues { value in
            switch value {
            case .bool(let flag): flag ? "true" : "false"
            case .integer(let number): String(number)
            case .string(let text): text
            default: "null"
            }
        }
    }

    /// Runs one of the Python examples of docs/contract.md and returns its standard output.
    func run(_ arguments: [String]) throws -> Data {
        let run = try CommandRun.run(URL(fileURLWithPath: Self.python), arguments)
        #expect(run.status == 0, "the reader failed (is redis-py installed?): \(run.errors)")
        return Data(run.output.utf8)
    }

    @Test("sessions that began at or before consent-revoked are invalid; later ones are valid")
    func consentRevoked() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let revokedAt: Int64 = 1_796_000_000_000
        #expect(
            try stack.post(
                try stack.body(type: "consent-revoked", sub: "000010.p.0001", eventTimeMilliseconds: revokedAt)
            )
            .status == 200)
        let before = try read(stack, sub: "000010.p.0001", sessionStartedAt: revokedAt - 1)
        #expect(
            before == [
                "session_valid": "false", "account_deleted": "false", "email_forwarding": "null",
                "sessions_revoked_at": String(revokedAt), "last_event_type": "consent-revoked",
            ])
        #expect(try read(stack, sub: "000010.p.0001", sessionStartedAt: revokedAt)["session_valid"] == "false")
        #expect(try read(stack, sub: "000010.p.0001", sessionStartedAt: revokedAt + 1)["session_valid"] == "true")
    }

    @Test("an account deleted, an email forwarding off, and a user never notified")
    func otherStates() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let time: Int64 = 1_796_000_100_000
        #expect(
            try stack.post(try stack.body(type: "account-deleted", sub: "000010.p.0002", eventTimeMilliseconds: time))
                .status == 200)
        #expect(
            try stack.post(
                try stack.body(
                    type: "email-disabled", sub: "000010.p.0003", eventTimeMilliseconds: time,
                    email: "r@privaterelay.appleid.com",
                    isPrivateEmail: true)
            ).status == 200)
        let deleted = try read(stack, sub: "000010.p.0002", sessionStartedAt: time - 10)
        #expect(deleted["account_deleted"] == "true")
        #expect(deleted["session_valid"] == "false")
        #expect(deleted["email_forwarding"] == "disabled")
        let forwardingOff = try read(stack, sub: "000010.p.0003", sessionStartedAt: time - 10)
        #expect(forwardingOff["email_forwarding"] == "disabled")
        #expect(forwardingOff["session_valid"] == "true")
        let unknown = try read(stack, sub: "000010.p.0404", sessionStartedAt: time)
        #expect(unknown["session_valid"] == "true")
        #expect(unknown["account_deleted"] == "false")
    }

    @Test("the deletion consumer group gets each account-deleted once, and nothing else")
    func deletionQueue() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let script = URL(fileURLWithPath: Self.script).deletingLastPathComponent()
            .appendingPathComponent("siwa_deletions.py").path
        for (type, sub, time) in [
            ("account-deleted", "000014.t.0001", Int64(1_796_000_001_000)),
            ("consent-revoked", "000014.t.0002", 1_796_000_002_000),
            ("account-delete", "000014.t.0003", 1_796_000_003_000),
        ] {
            #expect(try stack.post(try stack.body(type: type, sub: sub, eventTimeMilliseconds: time)).status == 200)
        }
        let first = String(decoding: try run([script, "--redis-url", stack.redis.url()]), as: UTF8.self)
        #expect(
            first
                == """
                {"client_id": "com.example.app", "event_time": 1796000001000, "sub": "000014.t.0001"}
                {"client_id": "com.example.app", "event_time": 1796000003000, "sub": "000014.t.0003"}

                """)
        // Acknowledged: a second run finds nothing new.
        #expect(try run([script, "--redis-url", stack.redis.url()]).isEmpty)
    }
}
