import Foundation
import SIWAFastCGIClient
import SIWAServer
import SIWATestKit
import Synchronization
import Testing

/// The primary is paused past the failover under load (SIGSTOP: a VM pause, a long fork, a
/// stalled disk) and then resumes, still saying `master` until the sentinels demote it: a
/// primary, two replicas and three sentinels (real processes, loopback), the real `serve`,
/// 4 posting clients at about 100 notifications a second. `MONITOR` on the old primary
/// records every apply script call it runs. Once `serve` has learnt of the new primary (its
/// log says so), no request started after that may run the script on the old primary, and
/// every notification answered 200 must be on the primary the sentinels name at the end,
/// each jti once in the stream. Apple is stood in for by the test: a non-2xx answer is
/// retried once, after the failover.
@Suite("Redis Sentinel: the old primary resumes after a failover", .serialized)
struct SentinelPauseTests {
    static let count = 1200
    static let clients = 4
    /// More workers than clients, as in production: some connections sit idle on the old primary
    /// through the pause and are used again after it (the ones that must ask before writing).
    static let workers = 8
    static let pauseAfterAnswers = 300
    /// 1,200 requests over about 10 s: the pause lands after about 3 s.
    static let spacing = Duration.milliseconds(8)
    /// Past `down-after-milliseconds` (1 s) and the failover: the old primary resumes after this,
    /// and not before `serve` has learnt of the new one.
    static let pause = Duration.seconds(3)

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    struct Sent: Sendable {
        let sub: String
        let jti: String
        let body: [UInt8]
    }

    struct Answer: Sendable {
        let index: Int
        let status: Int?
        let outcome: String?
        let started: ContinuousClock.Instant
    }

    struct Report {
        var answeredOK = 0
        var lost: [String] = []
        var repeatedInStream: [String] = []
        var unknownInStream = 0
        var stillFailingAfterRetry = 0
        var spooledAnswers = 0
        /// Apply script calls the old primary ran for requests started after serve learnt of the new primary.
        var appliesOnOldPrimaryAfterLearning: [Int] = []
        /// All apply script calls the old primary ran from its resumption on (sent before it paused or while it was paused).
        var appliesOnOldPrimaryAfterResume = 0
    }

    /// `MONITOR` on one node through `redis-cli`, into a file, until `stop()`.
    final class Monitor {
        let process = Process()
        let output: URL

        init(port: Int, directory: URL) throws {
            output = directory.appendingPathComponent("monitor-\(port).txt")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            let handle = try FileHandle(forWritingTo: output)
            process.executableURL = URL(fileURLWithPath: "/usr/bin/redis-cli")
            process.arguments = ["-h", "127.0.0.1", "-p", String(port), "monitor"]
            process.standardOutput = handle
            process.standardError = handle
            try process.run()
            try handle.close()
        }

        var text: String { (try? String(contentsOf: output, encoding: .utf8)) ?? "" }

        func stop() {
            guard process.isRunning else { return }
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// The instant the test first saw, in serve's log, that serve uses a primary other than `oldPort`.
    static func learnedOfNewPrimary(_ serve: ServeProcess, oldPort: Int) -> Bool {
        let switched = serve.logLines(event: "redis_primary_switched").contains {
            $0.contains(#""new":"127.0.0.1:"#) && !$0.contains(#""new":"127.0.0.1:\#(oldPort)""#)
        }
        let found = serve.logLines(event: "redis_primary_found").contains {
            $0.contains(#""primary":"127.0.0.1:"#) && !$0.contains(#""primary":"127.0.0.1:\#(oldPort)""#)
        }
        return switched || found
    }

    static func run(minimumReplicas: Int) throws -> Report {
        let cluster = try RedisSentinelCluster(downAfterMilliseconds: 1000)
        defer { cluster.shutdown() }
        let stack = try ServeStack(extraEnvironment: [
            "SIWA_REDIS_SENTINELS": cluster.sentinelList,
            "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
            "SIWA_REDIS_MIN_REPLICAS": String(minimumReplicas),
            "SIWA_REDIS_REPLICA_TIMEOUT_MS": "100",
            "SIWA_WORKERS": String(workers),
        ])
        defer { stack.shutdown() }
        let serve = try #require(stack.serve)

        let key = stack.key
        let now = Int64(Date().timeIntervalSince1970)
        let runID = String(UUID().uuidString.prefix(8))
        let sent = Mutex<[Int: Sent]>([:])
        DispatchQueue.concurrentPerform(iterations: clients) { thread in
            for index in stride(from: thread, to: count, by: clients) {
                let notification = TestNotification(
                    type: index % 2 == 0 ? "consent-revoked" : "account-deleted", subject: "001.ps\(runID).\(index)",
                    clientID: ServeStack.clientID, eventTimeMilliseconds: (now - 5) * 1000, issuedAt: now - 1)
                let body = Array((try? notification.requestBody(signedWith: key))?.utf8 ?? "".utf8)
                sent.withLock { $0[index] = Sent(sub: notification.subject, jti: notification.tokenID, body: body) }
            }
        }
        let notifications = sent.withLock { dictionary in (0..<count).map { dictionary[$0]! } }
        try #require(notifications.allSatisfy { !$0.body.isEmpty })

        let oldPrimary = cluster.initialPrimary
        let monitor = try Monitor(port: oldPrimary.port, directory: stack.directory)
        defer { monitor.stop() }
        try #require(stack.waitUntil(timeout: 10) { monitor.text.hasPrefix("OK") }, "MONITOR did not start")

        let socketPath = stack.socketPath
        let answers = Mutex<[Answer]>([])
        let post: @Sendable (Int) -> Answer = { index in
            let started = ContinuousClock.now
            let params = FastCGIClient.params(
                method: "POST", uri: "/apple/notifications", body: notifications[index].body,
                contentType: "application/json", extra: [("REQUEST_ID", "pause-\(index)")])
            let response = try? FastCGIClient(.unixSocket(socketPath), timeout: .seconds(10))
                .send(params: params, body: notifications[index].body)
            return Answer(
                index: index, status: response?.status, outcome: response?.jsonFields["status"], started: started)
        }
        let group = DispatchGroup()
        let loadStarted = ContinuousClock.now
        for thread in 0..<clients {
            group.enter()
            Thread {
                defer { group.leave() }
                for index in stride(from: thread, to: count, by: clients) {
                    let due = loadStarted + spacing * index
                    if due > .now { Thread.sleep(forTimeInterval: Self.seconds(due - .now)) }
                    let answer = post(index)
                    answers.withLock { $0.append(answer) }
                }
            }.start()
        }

        #expect(stack.waitUntil(timeout: 60) { answers.withLock { $0.count } >= pauseAfterAnswers })
        oldPrimary.pause()
        let pausedAt = ContinuousClock.now
        // The instant serve's log first says it uses another primary (seen by polling: a little
        // after serve knew, so a request started later certainly started after it knew).
        let learned = stack.waitUntil(timeout: 30) { learnedOfNewPrimary(serve, oldPort: oldPrimary.port) }
        let learnedAt = ContinuousClock.now
        if pausedAt + pause > .now { Thread.sleep(forTimeInterval: Self.seconds(pausedAt + pause - .now)) }
        let resumedAtWallClock = Date().timeIntervalSince1970
        oldPrimary.resume()
        try #require(learned, "serve did not learn of a new primary within 30 s: \(serve.logText.suffix(2000))")

        #expect(group.wait(timeout: .now() + 90) == .success, "the load did not finish within 90 s")
        var report = Report()
        var final = answers.withLock { $0 }
        for index in final.filter({ $0.status != 200 }).map(\.index) {
            let answer = post(index)
            final.append(answer)
            if answer.status != 200 { report.stillFailingAfterRetry += 1 }
        }

        // The sentinels demote the old primary (it resynchronises from the new one, dropping what it
        // took meanwhile) and the spool drains into the primary they name.
        var currentPrimary = 0
        let settled = try stack.waitUntil(timeout: 90) {
            guard let named = cluster.currentPrimaryFromSentinels(), named != oldPrimary.port,
                (try? cluster.connection(port: oldPrimary.port).command("ROLE"))?.array?.first?.string == "slave"
            else { return false }
            currentPrimary = named
            let health = try stack.request("GET", "/healthz")
            return health.status == 200 && health.jsonFields["spool_depth"] == "0"
                && health.jsonFields["redis_primary"] == "127.0.0.1:\(named)"
        }
        #expect(settled, "the old primary was not demoted or the spool did not drain: \(serve.logText.suffix(2000))")
        // The old node is a replica now: nothing more it runs comes from a client.
        monitor.stop()

        // Every apply script call the old primary ran, by the notification it carried.
        let marker = "001.ps\(runID)."
        let started = Dictionary(final.map { ($0.index, $0.started) }, uniquingKeysWith: { first, _ in first })
        for line in monitor.text.split(separator: "\n")
        where line.contains(#"] "EVALSHA""#) || line.contains(#"] "EVAL""#) {
            guard let range = line.range(of: marker) else { continue }
            let digits = line[range.upperBound...].prefix { $0.isNumber }
            guard let index = Int(digits) else { continue }
            let executedAt = Double(line.prefix { $0 != " " }) ?? 0
            if executedAt >= resumedAtWallClock { report.appliesOnOldPrimaryAfterResume += 1 }
            if let start = started[index], start > learnedAt { report.appliesOnOldPrimaryAfterLearning.append(index) }
        }

        let answeredOK = Set(final.filter { $0.status == 200 }.map(\.index))
        report.answeredOK = answeredOK.count
        report.spooledAnswers = final.filter { $0.outcome == "spooled" }.count
        let connection = cluster.connection(port: currentPrimary)
        for index in answeredOK.sorted() {
            let stored = try connection.command(
                "HGET", "siwa:user:{\(ServeStack.clientID):\(notifications[index].sub)}", "last_jti"
            ).string
            if stored != notifications[index].jti { report.lost.append(notifications[index].sub) }
        }
        var seen: [String: Int] = [:]
        for entry in try connection.command("XRANGE", "siwa:events", "-", "+").array ?? [] {
            if let fields = entry.array?.last?.fieldMap, let jti = fields["jti"] { seen[jti, default: 0] += 1 }
        }
        let ours = Set(notifications.map(\.jti))
        report.repeatedInStream = seen.filter { $0.value > 1 }.map(\.key)
        report.unknownInStream = seen.keys.filter { !ours.contains($0) }.count
        for index in answeredOK where seen[notifications[index].jti] == nil {
            report.lost.append("stream:" + notifications[index].sub)
        }
        print(
            "pause past failover (SIWA_REDIS_MIN_REPLICAS=\(minimumReplicas)): \(count) notifications, \(clients) clients; "
                + "serve learnt of the new primary " + String(format: "%.2f", seconds(learnedAt - pausedAt))
                + " s after the pause; answered 200: \(report.answeredOK); answered spooled: \(report.spooledAnswers); "
                + "apply calls the old primary ran after it resumed: \(report.appliesOnOldPrimaryAfterResume) "
                + "(for requests started after serve learnt: \(report.appliesOnOldPrimaryAfterLearning.count)); "
                + "acknowledged and lost: \(report.lost.count)")
        return report
    }

    static func check(_ report: Report) {
        #expect(
            report.appliesOnOldPrimaryAfterLearning.count == 0,
            "the old primary ran the apply script for requests started after serve learnt of the new primary: \(report.appliesOnOldPrimaryAfterLearning.prefix(10))"
        )
        #expect(report.lost.count == 0, "acknowledged and lost, for example: \(report.lost.prefix(5))")
        #expect(report.repeatedInStream.isEmpty, "\(report.repeatedInStream.prefix(5))")
        #expect(report.unknownInStream == 0)
        #expect(report.stillFailingAfterRetry == 0)
        #expect(report.answeredOK == count)
    }

    @Test(
        "SIWA_REDIS_MIN_REPLICAS=0: no apply on the resumed old primary; every notification answered 200 on the new one"
    )
    func pauseWithoutReplicaAcknowledgement() throws {
        Self.check(try Self.run(minimumReplicas: 0))
    }

    @Test(
        "SIWA_REDIS_MIN_REPLICAS=1: no apply on the resumed old primary; every notification answered 200 on the new one"
    )
    func pauseWithReplicaAcknowledgement() throws {
        Self.check(try Self.run(minimumReplicas: 1))
    }
}
