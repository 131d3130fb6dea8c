import Foundation
import Glibc
import Testing

/// The Python examples of docs/contract.md with a Sentinel configuration (redis-py's `Sentinel`),
/// run across a real failover: the session check answers from the new primary, the
/// deletion-queue consumer group resumes without losing an entry, and a pub/sub
/// subscriber reconnects and keeps receiving.
@Suite("Python readers across a Sentinel failover", .serialized)
struct SentinelReaderTests {
    static let examples = URL(fileURLWithPath: ExampleFiles.path("examples/python"))

    static func sentinelArguments(_ cluster: RedisSentinelCluster) -> [String] {
        [
            "--redis-url", "redis://127.0.0.1:1/0", "--sentinels", cluster.sentinelList, "--sentinel-master",
            RedisSentinelCluster.masterName,
        ]
    }

    /// Runs one example to its end (bounded at 60 s): its standard output.
    static func run(_ script: String, _ arguments: [String]) throws -> String {
        let run = try CommandRun.run(
            URL(fileURLWithPath: ExampleFiles.python), [examples.appendingPathComponent(script).path] + arguments)
        #expect(run.status == 0, "\(script) failed: \(run.errors)")
        return run.output
    }

    /// Both replicas hold what the primary holds (their offset reached the primary's).
    static func replicasCaughtUp(_ cluster: RedisSentinelCluster) -> Bool {
        let info =
            (try? cluster.connection(port: cluster.initialPrimary.port).command("INFO", "replication"))?
            .string ?? ""
        let fields = info.split(separator: "\r\n")
        guard
            let masterOffset = fields.first(where: { $0.hasPrefix("master_repl_offset:") })?.split(separator: ":")
                .last
        else { return false }
        let replicas = fields.filter { $0.hasPrefix("slave") && $0.contains("offset=") }
        return replicas.count == 2 && replicas.allSatisfy { $0.contains("offset=\(masterOffset),") }
    }

    @Test("session check, deletion queue and pub/sub subscriber, before and after the primary is SIGKILLed")
    func acrossAFailover() throws {
        let cluster = try RedisSentinelCluster()
        defer { cluster.shutdown() }
        let stack = try ServeStack(extraEnvironment: [
            "SIWA_REDIS_SENTINELS": cluster.sentinelList,
            "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
            "SIWA_REDIS_MIN_REPLICAS": "1",
        ])
        defer { stack.shutdown() }
        let sentinel = Self.sentinelArguments(cluster)
        let time: Int64 = 1_796_000_000_000

        #expect(
            try stack.post(try stack.body(type: "account-deleted", sub: "000020.ha.0001", eventTimeMilliseconds: time))
                .jsonFields["status"] == "applied")
        let firstDeletions = try Self.run("siwa_deletions.py", sentinel)
        #expect(firstDeletions.contains(#""sub": "000020.ha.0001""#), "\(firstDeletions)")

        // A subscriber, connected before the failover.
        let subscriberOutput = stack.directory.appendingPathComponent("subscriber.out")
        _ = FileManager.default.createFile(atPath: subscriberOutput.path, contents: nil)
        let subscriber = Process()
        subscriber.executableURL = URL(fileURLWithPath: ExampleFiles.python)
        subscriber.arguments =
            [Self.examples.appendingPathComponent("siwa_notifications.py").path] + sentinel + [
                "--count", "2", "--timeout", "60",
            ]
        let handle = try FileHandle(forWritingTo: subscriberOutput)
        defer { try? handle.close() }
        subscriber.standardOutput = handle
        subscriber.standardError = handle
        try subscriber.run()
        defer { if subscriber.isRunning { kill(subscriber.processIdentifier, SIGKILL) } }
        let subscriberText = { (try? String(contentsOf: subscriberOutput, encoding: .utf8)) ?? "" }
        #expect(stack.waitUntil(timeout: 20) { subscriberText().contains(#"{"subscribed": true}"#) })

        // Everything (the group's acknowledgement too) on both replicas, then the primary's machine is lost.
        #expect(stack.waitUntil(timeout: 10) { Self.replicasCaughtUp(cluster) })
        let oldPort = cluster.initialPrimary.port
        cluster.initialPrimary.kill()
        _ = try #require(cluster.waitForFailover(from: oldPort, timeout: 60))

        // Pub/sub does not keep messages for a disconnected subscriber: it must be back first.
        let subscriptions = { subscriberText().components(separatedBy: #"{"subscribed": true}"#).count - 1 }
        #expect(stack.waitUntil(timeout: 20) { subscriptions() >= 2 }, "no resubscription: \(subscriberText())")

        // Two notifications after the failover.
        for (type, sub) in [("consent-revoked", "000020.ha.0002"), ("account-deleted", "000020.ha.0003")] {
            #expect(
                try stack.post(try stack.body(type: type, sub: sub, eventTimeMilliseconds: time + 1000)).status == 200)
        }
        // The primary the sentinels name now (on a loaded machine they can fail over a second
        // time, a promotion they did not see finish started again with the other replica).
        #expect(
            try stack.waitUntil(timeout: 30) {
                let health = try stack.health()
                guard let primary = cluster.currentPrimaryFromSentinels() else { return false }
                return health.status == 200 && health.jsonFields["spool_depth"] == "0"
                    && health.jsonFields["redis_primary"] == "127.0.0.1:\(primary)"
            })

        // "Is this session valid?" from the new primary.
        let state = try Self.run(
            "siwa_state.py",
            sentinel + [
                "--client-id", ServeStack.clientID, "--sub", "000020.ha.0002", "--session-started-at",
                String(time + 1000),
            ])
        #expect(state.contains(#""session_valid": false"#), "\(state)")
        #expect(state.contains(#""last_event_type": "consent-revoked""#), "\(state)")

        // The consumer group resumes: the new deletion once, the old one not again.
        let secondDeletions = try Self.run("siwa_deletions.py", sentinel)
        #expect(
            secondDeletions
                == #"{"client_id": "com.example.app", "event_time": 1796000001000, "sub": "000020.ha.0003"}"# + "\n")

        // The subscriber reconnected and got both messages published on the new primary.
        #expect(stack.waitUntil(timeout: 30) { !subscriber.isRunning })
        #expect(subscriber.terminationStatus == 0, "\(subscriberText())")
        let text = subscriberText()
        #expect(text.contains(#""sub": "000020.ha.0002""#) && text.contains(#""sub": "000020.ha.0003""#), "\(text)")
    }
}
