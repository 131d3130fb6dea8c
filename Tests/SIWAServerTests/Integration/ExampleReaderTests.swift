import Foundation
import SIWAServer
import Synchronization
import Testing

/// The Node.js (node-redis) and Ruby (redis-rb) readers of docs/contract.md, run against state the real
/// responder wrote: the same cases as the Python reader's, plus the channel subscription.
@Suite("Node.js and Ruby readers of the Redis contract", .serialized)
struct ExampleReaderTests {
    enum Reader: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case node, ruby

        var testDescription: String { rawValue }

        var script: String {
            switch self {
            case .node: ExampleFiles.path("examples/node/siwa_reader.js")
            case .ruby: ExampleFiles.path("examples/ruby/siwa_reader.rb")
            }
        }

        /// Debian's node-redis lives in /usr/share/nodejs, which Debian's node searches and
        /// another node (a machine's preinstalled one) finds through NODE_PATH.
        var environment: [String: String] {
            let inherited = ProcessInfo.processInfo.environment
            var environment = ["PATH": inherited["PATH"] ?? "/usr/bin:/bin"]
            if self == .node {
                environment["NODE_PATH"] = ([inherited["NODE_PATH"], "/usr/share/nodejs"].compactMap { $0 })
                    .joined(separator: ":")
            }
            return environment
        }

        /// The reader as a process not yet started, for a test that watches it while it runs.
        func process(_ arguments: [String]) -> Process {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [rawValue, script] + arguments
            process.environment = environment
            return process
        }

        /// Runs the reader to its end and returns its standard output.
        func run(_ arguments: [String]) throws -> String {
            let run = try CommandRun.run(
                URL(fileURLWithPath: "/usr/bin/env"), [rawValue, script] + arguments, environment: environment)
            #expect(run.status == 0, "the \(rawValue) reader failed (scripts/install-deps installs it): \(run.errors)")
            return run.output
        }
    }

    func state(_ reader: Reader, _ stack: ServeStack, sub: String, sessionStartedAt: Int64) throws -> [String: String] {
        let output = try reader.run([
            "state", "--redis-url", stack.redis.url(), "--client-id", ServeStack.clientID, "--sub", sub,
            "--session-started-at", String(sessionStartedAt),
        ])
        return try ExampleFiles.flatJSON(output)
    }

    @Test(
        "sessions that began at or before consent-revoked are invalid; later ones are valid",
        arguments: Reader.allCases)
    func consentRevoked(_ reader: Reader) throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let revokedAt: Int64 = 1_796_000_000_000
        let sub = "000011.\(reader).0001"
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: sub, eventTimeMilliseconds: revokedAt))
                .status == 200)
        #expect(
            try state(reader, stack, sub: sub, sessionStartedAt: revokedAt - 1) == [
                "session_valid": "false", "account_deleted": "false", "email_forwarding": "null",
                "sessions_revoked_at": String(revokedAt), "last_event_type": "consent-revoked",
            ])
        #expect(try state(reader, stack, sub: sub, sessionStartedAt: revokedAt)["session_valid"] == "false")
        #expect(try state(reader, stack, sub: sub, sessionStartedAt: revokedAt + 1)["session_valid"] == "true")
    }

    @Test("an account deleted, an email forwarding off, and a user never notified", arguments: Reader.allCases)
    func otherStates(_ reader: Reader) throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let time: Int64 = 1_796_000_100_000
        #expect(
            try stack.post(try stack.body(type: "account-deleted", sub: "000011.d.0002", eventTimeMilliseconds: time))
                .status == 200)
        #expect(
            try stack.post(
                try stack.body(
                    type: "email-disabled", sub: "000011.d.0003", eventTimeMilliseconds: time,
                    email: "r@privaterelay.appleid.com", isPrivateEmail: true)
            ).status == 200)
        let deleted = try state(reader, stack, sub: "000011.d.0002", sessionStartedAt: time - 10)
        #expect(deleted["account_deleted"] == "true")
        #expect(deleted["session_valid"] == "false")
        #expect(deleted["email_forwarding"] == "disabled")
        let forwardingOff = try state(reader, stack, sub: "000011.d.0003", sessionStartedAt: time - 10)
        #expect(forwardingOff["email_forwarding"] == "disabled")
        #expect(forwardingOff["session_valid"] == "true")
        #expect(forwardingOff["account_deleted"] == "false")
        let unknown = try state(reader, stack, sub: "000011.d.0404", sessionStartedAt: time)
        #expect(
            unknown == [
                "session_valid": "true", "account_deleted": "false", "email_forwarding": "null",
                "sessions_revoked_at": "null", "last_event_type": "null",
            ])
    }

    @Test("the deletion consumer group gets each account-deleted once, and nothing else", arguments: Reader.allCases)
    func deletionQueue(_ reader: Reader) throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        for (type, sub, time) in [
            ("account-deleted", "000015.t.0001", Int64(1_796_000_001_000)),
            ("consent-revoked", "000015.t.0002", 1_796_000_002_000),
            ("account-delete", "000015.t.0003", 1_796_000_003_000),
        ] {
            #expect(try stack.post(try stack.body(type: type, sub: sub, eventTimeMilliseconds: time)).status == 200)
        }
        let first = try reader.run(["deletions", "--redis-url", stack.redis.url()])
        let handled = try first.split(separator: "\n").map { try ExampleFiles.flatJSON(String($0)) }
        #expect(
            handled == [
                ["client_id": "com.example.app", "sub": "000015.t.0001", "event_time": "1796000001000"],
                ["client_id": "com.example.app", "sub": "000015.t.0003", "event_time": "1796000003000"],
            ])
        // Acknowledged: a second run finds nothing new.
        #expect(try reader.run(["deletions", "--redis-url", stack.redis.url()]).isEmpty)
        // The group reads the deletions stream: nothing pending, nothing left to deliver.
        let pending = try stack.redisConnection().command("XPENDING", "siwa:deletions", "account-cleanup")
        #expect(pending.array?.first?.integer == 0)
        let reading = try DeletionDutyReading.read(stack.redisConnection(), key: "siwa:deletions")
        #expect(reading.entries == 2 && reading.groups.map(\.name) == ["account-cleanup"])
        #expect(reading.groups.first?.pending == 0)
    }

    @Test(
        "the subscription hears each applied revocation as it happens, and no other message", arguments: Reader.allCases
    )
    func subscription(_ reader: Reader) throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let process = reader.process(["subscribe", "--redis-url", stack.redis.url(), "--count", "2"])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        let received = Mutex("")
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil }  // the end: stop watching
            received.withLock { $0 += String(decoding: data, as: UTF8.self) }
        }
        try process.run()
        defer {
            if process.isRunning { process.terminate() }
            output.fileHandleForReading.readabilityHandler = nil
        }
        #expect(stack.waitUntil(timeout: 20) { received.withLock { $0 } == "subscribed\n" })
        for (type, sub) in [
            ("email-disabled", "000016.s.0001"), ("consent-revoked", "000016.s.0002"),
            ("account-deleted", "000016.s.0003"),
        ] {
            let email: String? = type == "email-disabled" ? "s@privaterelay.appleid.com" : nil
            #expect(try stack.post(try stack.body(type: type, sub: sub, email: email)).status == 200)
        }
        // Two revocations heard, then it exits by itself.
        #expect(stack.waitUntil(timeout: 20) { received.withLock { $0 }.filter { $0 == "\n" }.count == 3 })
        #expect(stack.waitUntil(timeout: 20) { !process.isRunning })
        #expect(process.terminationStatus == 0)
        let lines = received.withLock { $0 }.split(separator: "\n").map(String.init)
        #expect(lines.first == "subscribed")
        #expect(
            try lines.dropFirst().map(ExampleFiles.flatJSON) == [
                ["client_id": "com.example.app", "sub": "000016.s.0002", "type": "consent-revoked"],
                ["client_id": "com.example.app", "sub": "000016.s.0003", "type": "account-deleted"],
            ])
    }
}
