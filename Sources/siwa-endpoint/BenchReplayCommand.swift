import Foundation
import SIWARedis
import SIWASpool
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWAVerification

/// `bench --replay`: how fast the spool drains into Redis, against the same number of
/// notifications applied straight to Redis (what a live request does), in the same run.
enum BenchReplayCommand {
    static let help = """
        usage: siwa-endpoint bench --replay --redis-url URL [--records N]

        Spools N distinct notifications with the real spool (each appended and fsynced),
        replays them into the Redis at URL with the real replayer (one pass), then applies
        N other notifications straight to Redis on one connection as the baseline. Prints
        both rates and their ratio. Writes keys under the prefixes `siwa-bench-replay` and
        `siwa-bench-direct` (use a Redis of its own: scripts/bench-replay starts one).
        The spool lives in a temporary directory, deleted afterwards. Default: N = 2000.
        """

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(
            words.filter { $0 != "--replay" }, valueOptions: ["--records", "--redis-url"])
        let count = Int(try arguments.integer("--records") ?? 2000)
        guard count > 0 else { throw UsageError("--records must be positive") }
        guard let url = arguments.value("--redis-url") else { throw UsageError("--redis-url is required") }
        let endpoint = try RedisEndpoint(parsing: url)
        let clientID = "com.example.bench"
        let runID = UInt64(Date().timeIntervalSince1970 * 1000)
        func notification(_ index: Int, _ kind: String) -> VerifiedNotification {
            let now = Int64(Date().timeIntervalSince1970)
            return VerifiedNotification(
                clientID: clientID, subject: "001234.\(kind)\(index).0123", type: .consentRevoked,
                rawType: "consent-revoked", eventTimeMilliseconds: now * 1000, tokenID: "\(kind)-\(runID)-\(index)",
                issuedAt: now, expiresAt: nil, email: nil, isPrivateEmail: nil)
        }

        let directory = NSTemporaryDirectory() + "siwa-bench-replay-\(getpid())-\(runID)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spool = try NotificationSpool(directory: directory)
        let spoolStart = ContinuousClock.now
        for index in 0..<count { try spool.append(notification(index, "spooled")) }
        let spoolSeconds = seconds(since: spoolStart)

        let replayStore = NotificationStore(
            connection: RedisConnection(endpoint: endpoint), keyPrefix: "siwa-bench-replay")
        let replayer = SpoolReplayer(
            spool: spool, rejected: try SpoolSetAsideStore(spoolDirectory: directory), store: replayStore,
            metrics: ServerMetrics(), clientIDs: [clientID],
            clock: .system)
        let replayStart = ContinuousClock.now
        let report = replayer.replayOnce()
        let replaySeconds = seconds(since: replayStart)
        guard report.taken == count, report.remaining == 0, report.stop == nil, report.spoolError == nil else {
            Output.error(
                "bench: the replay took \(report.taken) of \(count) records (remaining \(report.remaining)): "
                    + "\(report.stop.map { "\($0)" } ?? report.spoolError.map { "\($0)" } ?? "stopped")")
            return 1
        }

        let directStore = NotificationStore(
            connection: RedisConnection(endpoint: endpoint), keyPrefix: "siwa-bench-direct")
        let directStart = ContinuousClock.now
        for index in 0..<count {
            _ = try directStore.apply(
                notification(index, "direct"), receivedAt: Int64(Date().timeIntervalSince1970 * 1000))
        }
        let directSeconds = seconds(since: directStart)

        let replayRate = Double(count) / replaySeconds
        let directRate = Double(count) / directSeconds
        let outcomes = report.steps.map { ($0.key.name, $0.value) }.sorted { $0.0 < $1.0 }.map { "\($0.0) \($0.1)" }
            .joined(
                separator: ", ")
        Output.line(
            """
            records: \(count) (replay outcomes: \(outcomes))
            spooling (append + fsync each):  \(format(Double(count) / spoolSeconds)) records/s
            replay (spool -> Redis, one pass): \(format(replayRate)) records/s
            direct apply (baseline):          \(format(directRate)) records/s
            ratio replay/direct: \(format(replayRate / directRate, digits: 3))
            """)
        return 0
    }

    private static func seconds(since start: ContinuousClock.Instant) -> Double {
        let elapsed = ContinuousClock.now - start
        return elapsed.inSeconds
    }

    private static func format(_ value: Double, digits: Int = 0) -> String {
        String(format: "%.\(digits)f", value)
    }
}
