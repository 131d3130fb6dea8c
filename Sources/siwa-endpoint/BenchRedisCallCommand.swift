import Foundation
import SIWARedis
import SIWAStore
import SIWASupport
import SIWAVerification

/// `bench --redis-call`: the CPU one Redis script call costs its client, as serve makes it
/// (`NotificationStore.apply`: the arguments built, the command written, the reply read
/// and parsed, over the same transport), on one thread: the Redis part of serve's floor
/// in `scripts/bench-e2e`.
enum BenchRedisCallCommand {
    static let help = """
        usage: siwa-endpoint bench --redis-call --redis-url URL [--calls N] [--rounds R]

        Applies R rounds of N distinct notifications (the four types in turn, each with its
        own user and jti, so every call is applied) to the Redis at URL on one connection,
        one thread, the way serve applies a verified notification (one EVALSHA of the
        notification script and its reply). Prints the median of the rounds: this
        thread's CPU time per call (user and system: what the client spends, asleep
        waiting for Redis not counted) and the wall time per call. Writes keys under
        the prefix `siwa-bench-call` (use a Redis of its own: scripts/bench-e2e runs it
        against its own). Defaults: N = 2000, R = 5.
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words.filter { $0 != "--redis-call" }, valueOptions: ["--calls", "--rounds", "--redis-url"])
        let calls = Int(try arguments.integer("--calls") ?? 2000)
        let rounds = Int(try arguments.integer("--rounds") ?? 5)
        guard (1...1_000_000).contains(calls), (1...100).contains(rounds) else {
            throw UsageError("--calls must be 1-1000000 and --rounds 1-100")
        }
        guard let url = arguments.value("--redis-url") else { throw UsageError("--redis-url is required") }
        let store = NotificationStore(
            connection: RedisConnection(endpoint: try RedisEndpoint(parsing: url)), keyPrefix: "siwa-bench-call")
        let runID = UInt64(Date().timeIntervalSince1970 * 1000)
        let now = Int64(Date().timeIntervalSince1970)
        // The connection and the script's SHA, outside the timed rounds.
        _ = try store.apply(notification(0, round: -1, runID: runID, now: now), receivedAt: now * 1000)

        var cpuPerCall: [Double] = []
        var wallPerCall: [Double] = []
        for round in 0..<rounds {
            // Built before the clock starts: verification makes them in serve.
            let batch = (0..<calls).map { notification($0, round: round, runID: runID, now: now) }
            var applied = 0
            let cpuStart = BenchCommand.threadCPUSeconds()
            let wallStart = ContinuousClock.now
            for item in batch where try store.apply(item, receivedAt: now * 1000) == .applied { applied += 1 }
            wallPerCall.append((ContinuousClock.now - wallStart).inSeconds / Double(calls) * 1e6)
            cpuPerCall.append((BenchCommand.threadCPUSeconds() - cpuStart) / Double(calls) * 1e6)
            guard applied == calls else {
                Output.error("bench: \(calls - applied) of \(calls) calls were not applied (is the Redis shared?)")
                return .failed
            }
        }
        Output.line(
            """
            Redis script call (NotificationStore.apply, one EVALSHA, one thread): \(rounds) rounds x \(calls) calls
            Redis script call CPU time: \(format(BenchCommand.median(cpuPerCall))) us each (this thread's; rounds \(cpuPerCall.map { format($0) }.joined(separator: " ")))
            Redis script call wall time: \(format(BenchCommand.median(wallPerCall))) us each
            """)
        return .success
    }

    /// The four types in turn, as scripts/bench-e2e signs them: a user and a jti of its own.
    private static func notification(_ index: Int, round: Int, runID: UInt64, now: Int64) -> VerifiedNotification {
        let rawTypes = ["email-disabled", "email-enabled", "consent-revoked", "account-deleted"]
        let rawType = rawTypes[index % rawTypes.count]
        let isEmailEvent = rawType.hasPrefix("email-")
        return VerifiedNotification(
            clientID: "com.example.bench", subject: "001234.call\(runID).\(round).\(index)",
            type: NotificationEventType(rawType: rawType), rawType: rawType, eventTimeMilliseconds: now * 1000,
            tokenID: "call-\(runID)-\(round)-\(index)", issuedAt: now, expiresAt: nil,
            email: isEmailEvent ? "relay-bench@privaterelay.appleid.com" : nil,
            isPrivateEmail: isEmailEvent ? true : nil)
    }

    private static func format(_ value: Double) -> String {
        String(format: "%.1f", value)
    }
}
