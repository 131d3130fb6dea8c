import Foundation
import SIWATestSupport
import Testing

/// The primary is paused (SIGSTOP: a VM pause, a long fork, a stalled disk) and continued after
/// a fixed time, whatever the sentinels have done meanwhile: a primary, two replicas and three
/// sentinels (real processes, loopback; `down-after-milliseconds 1000`, `failover-timeout
/// 5000`), the real `serve` with 8 workers, 4 posting clients at about 100 notifications a
/// second. Pauses shorter than the failover, around it and longer than it are each a case:
/// the old primary resumes saying `master` before, while or after the sentinels promote a
/// replica, and a sentinel asked then may still name it. Every notification answered 200 must
/// be on the primary the sentinels settle on at the end, each jti once in its stream. Apple is
/// stood in for by the test: a non-2xx answer is retried once, after the load.
///
/// The suite runs the cases below; `SIWA_PAUSE_SWEEP` runs another sweep, for example
/// `SIWA_PAUSE_SWEEP='0:1.5,2,2.5,3,3.5,4,5,6,+selected-slave;1:2,3,4;2:3'` (min replicas:
/// pause seconds, or a sentinel event to continue it at).
@Suite("Redis Sentinel: a paused primary resumes (a sweep of pause lengths)", .serialized)
struct SentinelPauseTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let minimumReplicas: Int
        /// How long the primary stays paused, or nil: until `resumeAtEvent`.
        let pauseMilliseconds: Int?
        /// A sentinel event (`+odown`, `+promoted-slave`, ...): the primary is continued the
        /// moment the first sentinel publishes it, inside the failover's window, whatever the
        /// failover's own timing on this machine.
        let resumeAtEvent: String?

        init(minimumReplicas: Int, pauseMilliseconds: Int) {
            self.minimumReplicas = minimumReplicas
            self.pauseMilliseconds = pauseMilliseconds
            resumeAtEvent = nil
        }

        init(minimumReplicas: Int, resumeAtEvent: String) {
            self.minimumReplicas = minimumReplicas
            pauseMilliseconds = nil
            self.resumeAtEvent = resumeAtEvent
        }

        var testDescription: String {
            "SIWA_REDIS_MIN_REPLICAS=\(minimumReplicas), "
                + (pauseMilliseconds.map { "pause \($0) ms" } ?? "resumed at \(resumeAtEvent ?? "?")")
        }
    }

    /// Fixed pauses before and past the failover, and resumptions inside it: at `+odown` (the
    /// sentinels agree it is down; a failover starts), and at `+promoted-slave` (a replica is
    /// the new master, announced by one sentinel; the others still name the old node, which
    /// says master: the issue's loss), with 0, 1 and 2 replicas acknowledging.
    static let defaultSweep = [
        Case(minimumReplicas: 0, pauseMilliseconds: 2500), Case(minimumReplicas: 0, pauseMilliseconds: 5000),
        Case(minimumReplicas: 0, resumeAtEvent: "+odown"), Case(minimumReplicas: 0, resumeAtEvent: "+promoted-slave"),
        Case(minimumReplicas: 1, resumeAtEvent: "+promoted-slave"),
        Case(minimumReplicas: 2, resumeAtEvent: "+promoted-slave"),
    ]

    /// The Valkey pass of the suite (`SIWA_TEST_REDIS_SERVER=valkey`) runs the case inside the
    /// failover only: the rule is the same code, the sentinels' answers are Valkey's.
    static let valkeySweep = [Case(minimumReplicas: 0, resumeAtEvent: "+promoted-slave")]

    static var sweep: [Case] {
        let environment = ProcessInfo.processInfo.environment
        guard let text = environment["SIWA_PAUSE_SWEEP"], !text.isEmpty else {
            return environment["SIWA_TEST_REDIS_SERVER"] == "valkey" ? valkeySweep : defaultSweep
        }
        return text.split(separator: ";").flatMap { group -> [Case] in
            let parts = group.split(separator: ":")
            guard parts.count == 2, let replicas = Int(parts[0]) else { return [] }
            return parts[1].split(separator: ",").map { item in
                Double(item).map { Case(minimumReplicas: replicas, pauseMilliseconds: Int($0 * 1000)) }
                    ?? Case(minimumReplicas: replicas, resumeAtEvent: String(item))
            }
        }
    }

    static let clients = 4
    static let workers = 8
    static let spacing = Duration.milliseconds(10)
    static let pauseAfterAnswers = 150

    /// `SUBSCRIBE <channel>` on every sentinel through `redis-cli`, into files, until `stop()`.
    final class SentinelEvents {
        let processes: [Process]
        let outputs: [URL]

        init(channel: String, sentinels: [RedisSentinelCluster.Node], directory: URL) throws {
            var processes: [Process] = []
            var outputs: [URL] = []
            for sentinel in sentinels {
                let output = directory.appendingPathComponent("sentinel-\(sentinel.port)-events.txt")
                _ = FileManager.default.createFile(atPath: output.path, contents: nil)
                let handle = try FileHandle(forWritingTo: output)
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/redis-cli")
                process.arguments = ["-h", "127.0.0.1", "-p", String(sentinel.port), "subscribe", channel]
                process.standardOutput = handle
                process.standardError = handle
                try process.run()
                try handle.close()
                processes.append(process)
                outputs.append(output)
            }
            self.processes = processes
            self.outputs = outputs
        }

        private func text(_ url: URL) -> String { (try? String(contentsOf: url, encoding: .utf8)) ?? "" }

        /// Every subscription is confirmed (redis-cli printed the count of channels).
        var subscribed: Bool { outputs.allSatisfy { text($0).split(separator: "\n").count >= 3 } }

        /// A sentinel published a message on the channel.
        var published: Bool { outputs.contains { text($0).contains("message\n") } }

        func stop() {
            for process in processes where process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
    }

    @Test("nothing answered 200 is lost when the paused primary resumes", arguments: sweep)
    func pausedPrimaryResumes(_ sweepCase: Case) throws {
        // An event inside the failover comes within about 4 s here.
        let pause = Duration.milliseconds(sweepCase.pauseMilliseconds ?? 4000)
        // The load covers the pause and 4 s after it: writes and the replay meet the resumed node.
        let count = Int((FaultUnderLoad.seconds(pause) + 5.5) / FaultUnderLoad.seconds(Self.spacing))
        let cluster = try RedisSentinelCluster(downAfterMilliseconds: 1000, failoverTimeoutMilliseconds: 5000)
        defer { cluster.shutdown() }
        let stack = try ServeStack(extraEnvironment: [
            "SIWA_REDIS_SENTINELS": cluster.sentinelList,
            "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
            "SIWA_REDIS_MIN_REPLICAS": String(sweepCase.minimumReplicas),
            "SIWA_REDIS_REPLICA_TIMEOUT_MS": "100",
            "SIWA_WORKERS": String(Self.workers),
        ])
        defer { stack.shutdown() }
        let serve = try #require(stack.serve)

        let load = try FaultUnderLoad(
            stack, count: count, clients: Self.clients, spacing: Self.spacing, subjectTag: "ps", requestLabel: "pause")
        let events = try sweepCase.resumeAtEvent.map {
            try SentinelEvents(channel: $0, sentinels: cluster.sentinels, directory: stack.directory)
        }
        defer { events?.stop() }
        if let events {
            try #require(stack.waitUntil(timeout: 10) { events.subscribed }, "the event subscriptions did not start")
        }
        let oldPrimary = cluster.initialPrimary
        var pausedFor = Duration.zero
        let outcome = try load.run(faultAfter: Self.pauseAfterAnswers, loadTimeout: 120) {
            oldPrimary.pause()
            let pausedAt = ContinuousClock.now
            if let events {
                // Continued the moment a sentinel publishes the event (polled every few milliseconds).
                let seen = waitUntil(timeout: 30, interval: .milliseconds(5)) { events.published }
                oldPrimary.resume()
                try #require(seen, "no sentinel published \(sweepCase.resumeAtEvent ?? "") within 30 s")
            } else {
                // Continued after exactly the pause, whatever serve or the sentinels know by then.
                Thread.sleep(forTimeInterval: FaultUnderLoad.seconds(pause))
                oldPrimary.resume()
            }
            pausedFor = ContinuousClock.now - pausedAt
        }

        // The sentinels settle (one address, one epoch, no failover under way, its ROLE master)
        // and the spool drains into the primary they name. The old primary, if demoted, has not
        // necessarily resynchronised yet: only the settled primary is read.
        let drain = try load.waitForDrain(timeout: 90) { cluster.settledPrimary() }
        let settled = drain.drained
        let settledPort = drain.port ?? 0
        try #require(settled, "the sentinels did not settle or the spool did not drain: \(serve.logText.suffix(3000))")

        let answeredOK = outcome.answeredOK
        let contract = try load.contract(outcome, on: cluster.connection(port: settledPort))
        let lost = contract.notStored + contract.notInStream.map { "stream:" + $0 }
        let spooled = outcome.answers.filter { $0.outcome == "spooled" }.count
        let failedOver = settledPort != oldPrimary.port
        print(
            "paused primary (\(sweepCase.testDescription)): paused "
                + String(format: "%.2f", FaultUnderLoad.seconds(pausedFor))
                + " s; \(count) notifications; failed over: \(failedOver); "
                + "answered 200: \(answeredOK.count); answered spooled: \(spooled); "
                + "unsettled discoveries logged: \(serve.logText.components(separatedBy: "redis_sentinels_unsettled").count - 1); "
                + "acknowledged and lost: \(lost.count)")
        #expect(lost.count == 0, "acknowledged and lost: \(lost.count), for example \(lost.prefix(5))")
        #expect(contract.repeatedInStream.isEmpty, "a jti twice in the stream")
        #expect(contract.unknownInStream == 0)
        #expect(outcome.stillFailingAfterRetry == 0)
        #expect(answeredOK.count == count)
    }
}
