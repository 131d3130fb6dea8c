import Foundation
import SIWARedis
import SIWAStore
import SIWAVerification
import Synchronization

/// `bench --webhooks`: the latency a webhook adds over pub/sub, and the deliverer's rate,
/// measured in one run (see `scripts/bench-webhooks`, which starts Redis, a receiver and the
/// deliverer around it).
enum BenchWebhooksCommand {
    static let help = """
        usage: siwa-endpoint bench --webhooks --redis-url URL --receiver-log FILE
                                   [--count N] [--rate R] [--flood M] [--deliverer-pid PID]

        Writes N notifications through serve's own apply script (the events stream entry and
        the pub/sub message in one atomic call, as serve does when it answers Apple's POST)
        at R per second (default 50), while subscribed to the notifications channel; FILE is
        the receiver's log (one "<webhook-id> <Unix ms>" line per request). For each, from
        the moment the write returned: the pub/sub message's arrival (the baseline, the
        Redis readers' path) and the receiver's request (a running `siwa-endpoint deliver`).
        Prints p50 and p99 of both and their difference. Then M more (default 2000) as fast
        as they can be written: events delivered per second (the first write to the last
        arrival). With PID (the running deliverer's process), the M are written while the
        deliverer is stopped (SIGSTOP), so that it then works through a backlog of M alone
        (SIGCONT): events per second from its resumption to the last arrival, and its CPU time
        (user and system, all threads) over that span per event. Asserts nothing; exit 1 when
        an event did not arrive within 60 s.
        """

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(
            words.filter { $0 != "--webhooks" },
            valueOptions: ["--redis-url", "--receiver-log", "--count", "--rate", "--flood", "--deliverer-pid"])
        guard let url = arguments.value("--redis-url"), let log = arguments.value("--receiver-log") else {
            throw UsageError("--redis-url and --receiver-log are required")
        }
        let count = Int(try arguments.integer("--count") ?? 500)
        let flood = Int(try arguments.integer("--flood") ?? 2000)
        let rate = Double(arguments.value("--rate") ?? "50") ?? 50
        guard count > 0, flood > 0, rate > 0 else { throw UsageError("--count, --flood and --rate must be positive") }
        let delivererPID = try arguments.integer("--deliverer-pid").map { Int32(clamping: $0) }
        if let delivererPID, cpuSeconds(of: delivererPID) == nil {
            throw UsageError("--deliverer-pid \(delivererPID): no such process to read /proc/\(delivererPID)/stat of")
        }
        let endpoint = try RedisEndpoint(parsing: url)
        let store = NotificationStore(connection: RedisConnection(endpoint: endpoint))
        let published = Arrivals()
        let subscriber = Subscriber(RedisConnection(endpoint: endpoint, commandTimeout: .seconds(120)))
        try StoreReader(connection: subscriber.connection).subscribe(store.keys.notifications)
        let listening = Thread {
            while true {
                guard let reply = try? subscriber.connection.nextPushedReply(), let parts = reply.array,
                    parts.count == 3,
                    let message = parts[2].string, let range = message.range(of: #""jti":""#)
                else { return }
                let rest = message[range.upperBound...]
                let jti = String(rest.prefix { $0 != "\"" })
                let now = nowMilliseconds()
                published.times.withLock { $0[jti] = now }
            }
        }
        listening.start()
        let runID = Int64(nowMilliseconds())
        func write(_ jti: String) throws -> Double {
            let now = Int64(nowMilliseconds())
            let notification = VerifiedNotification(
                clientID: "com.example.bench", subject: "bench.\(jti)",
                type: NotificationEventType(rawType: "consent-revoked"),
                rawType: "consent-revoked", eventTimeMilliseconds: now, tokenID: jti, issuedAt: now / 1000,
                expiresAt: nil, email: nil, isPrivateEmail: nil)
            _ = try store.apply(notification, receivedAt: now)
            return nowMilliseconds()
        }
        var written: [String: Double] = [:]
        let interval = 1 / rate
        let start = Date()
        for index in 0..<count {
            let jti = "bench-\(runID)-\(index)"
            written[jti] = try write(jti)
            let due = start.addingTimeInterval(Double(index + 1) * interval)
            if due > Date() { Thread.sleep(until: due) }
        }
        guard let arrived = waitForArrivals(log, ids: Set(written.keys)) else {
            Output.error("bench --webhooks: not every event reached the receiver within 60 s")
            return 1
        }
        let pubsub = written.compactMap { jti, at in published.times.withLock { $0[jti] }.map { $0 - at } }
        let webhook = written.compactMap { jti, at in arrived[jti].map { $0 - at } }
        Output.line("paced: \(count) notifications at \(rate)/s")
        Output.line(
            "  pub/sub (baseline)   p50 \(percentile(pubsub, 0.5)) ms  p99 \(percentile(pubsub, 0.99)) ms  (\(pubsub.count) messages)"
        )
        Output.line(
            "  webhook (deliver)    p50 \(percentile(webhook, 0.5)) ms  p99 \(percentile(webhook, 0.99)) ms  (\(webhook.count) requests)"
        )
        Output.line(
            "  webhook - pub/sub    p50 \(rounded(percentile(webhook, 0.5) - percentile(pubsub, 0.5))) ms  p99 \(rounded(percentile(webhook, 0.99) - percentile(pubsub, 0.99))) ms"
        )
        var floodIDs = Set<String>()
        if let delivererPID { kill(delivererPID, SIGSTOP) }
        // Resumed whatever happens below, so a failed write leaves no stopped deliverer behind.
        var resumed = false
        defer { if let delivererPID, !resumed { kill(delivererPID, SIGCONT) } }
        let writeStart = nowMilliseconds()
        for index in 0..<flood {
            let jti = "flood-\(runID)-\(index)"
            _ = try write(jti)
            floodIDs.insert(jti)
        }
        let floodWritten = nowMilliseconds()
        let cpuAtStart = delivererPID.flatMap(cpuSeconds(of:))
        if let delivererPID {
            kill(delivererPID, SIGCONT)
            resumed = true
        }
        let floodStart = delivererPID == nil ? writeStart : nowMilliseconds()
        guard let floodArrived = waitForArrivals(log, ids: floodIDs), let last = floodArrived.values.max() else {
            Output.error("bench --webhooks: the flood did not reach the receiver within 60 s")
            return 1
        }
        // Read once every event has arrived: the last POST's answer and acknowledgement are a few
        // microseconds of CPU against the flood's seconds.
        let cpuAtEnd = delivererPID.flatMap(cpuSeconds(of:))
        let seconds = max(0.001, last - floodStart) / 1000
        var line =
            "flood: \(flood) notifications written in \(rounded((floodWritten - writeStart) / 1000)) s\(delivererPID == nil ? "" : " (deliverer stopped)"); delivered in \(rounded(seconds)) s: \(Int(Double(flood) / seconds)) events/s"
        if let cpuAtStart, let cpuAtEnd {
            line += "; deliverer CPU \(rounded((cpuAtEnd - cpuAtStart) * 1000 / Double(flood))) ms/event"
        }
        Output.line(line)
        return 0
    }

    /// User plus system CPU seconds of process `pid`, every thread (fields 14 and 15 of
    /// /proc/PID/stat, in clock ticks); nil when it cannot be read.
    static func cpuSeconds(of pid: Int32) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        // After the name (which may hold spaces, so it is skipped to its closing parenthesis),
        // the fields from the third on.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The receiver log's arrival time of each of `ids`, once all are there (nil after 60 s).
    static func waitForArrivals(_ path: String, ids: Set<String>) -> [String: Double]? {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            var arrived: [String: Double] = [:]
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            for line in text.split(separator: "\n") {
                let parts = line.split(separator: " ")
                guard parts.count == 2, ids.contains(String(parts[0])), let time = Double(parts[1]) else { continue }
                arrived[String(parts[0])] = min(arrived[String(parts[0])] ?? time, time)
            }
            if arrived.count == ids.count { return arrived }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return nil
    }

    static func percentile(_ values: [Double], _ fraction: Double) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        return rounded(sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * fraction).rounded()))])
    }

    static func rounded(_ value: Double) -> Double { (value * 100).rounded() / 100 }

    static func nowMilliseconds() -> Double { Date().timeIntervalSince1970 * 1000 }
}

/// The pub/sub connection, read by the listening thread alone after SUBSCRIBE.
private final class Subscriber: @unchecked Sendable {
    let connection: RedisConnection
    init(_ connection: RedisConnection) { self.connection = connection }
}

/// When each jti's pub/sub message arrived.
private final class Arrivals: Sendable {
    let times = Mutex<[String: Double]>([:])
}
