import Foundation
import SIWACrypto
import SIWAFastCGIClient
import SIWAJSON
import SIWASupport
import SIWATestKit
import SIWAVerification
import Synchronization

/// `load`: drives a running responder over its FastCGI socket and prints what it sustained.
/// Speed is measured, not asserted: phase B (notifications) is reported as a ratio of phase A
/// (health checks over the same transport) measured in the same run, since machines are noisy.
enum LoadCommand {
    static let help = """
        usage: siwa-endpoint load --socket PATH --key FILE --kid KID --client-id ID
                                  [--count N] [--concurrency C] [--path /apple/notifications]
                                  [--hang-redis PID]

        Signs N distinct notifications (distinct sub and jti; email-disabled,
        email-enabled, consent-revoked and account-deleted in turn) with the test
        key FILE before any timing, then, with C client threads, each request on
        its own connection (as nginx's fastcgi_keep_conn off does):
          phase A (baseline): N GET /healthz (transport + one Redis PING)
          phase B: the N notification POSTs (verification + Redis script + transport)
        Prints per phase: requests, seconds, requests/s, p50 and p99 latency in ms,
        non-2xx count; then the ratio of the rates B/A. Exit status 1 when any
        request of either phase is not 2xx. The responder must accept the key's
        kid and the client ID. Every request times out after 10 s.
        Defaults: N = 2000 (at most 100000), C = 4 (at most 256).

        With --hang-redis PID (the redis-server the responder writes to, on this
        machine), the phases are instead:
          phase A (baseline): N notification POSTs with Redis answering
          phase B: N more notification POSTs while that process is stopped
                   (SIGSTOP before the phase, SIGCONT after it, also on failure)
        so B/A is the rate a hanging Redis leaves, and phase B's p99 what one
        request waits then. The responder spools phase B; it is applied when
        Redis resumes.
        """

    static let maximumCount = 100_000
    static let maximumConcurrency = 256
    static let requestTimeout: Duration = .seconds(10)
    static let eventTypes = ["email-disabled", "email-enabled", "consent-revoked", "account-deleted"]

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words,
            valueOptions: [
                "--socket", "--key", "--kid", "--client-id", "--count", "--concurrency", "--path", "--hang-redis",
            ])
        let socketPath = try arguments.required("--socket")
        let keyPath = try arguments.required("--key")
        let clientID = try arguments.required("--client-id")
        let count = try arguments.integer("--count") ?? 2000
        let concurrency = try arguments.integer("--concurrency") ?? 4
        let path = arguments.value("--path") ?? "/apple/notifications"
        guard (1...Int64(maximumCount)).contains(count) else {
            throw UsageError("--count must be between 1 and \(maximumCount), got \(count)")
        }
        guard (1...Int64(maximumConcurrency)).contains(concurrency) else {
            throw UsageError("--concurrency must be between 1 and \(maximumConcurrency), got \(concurrency)")
        }
        guard path.hasPrefix("/") else { throw UsageError("--path must start with /") }
        let hangPID = try arguments.integer("--hang-redis")
        if let hangPID, hangPID <= 1 || hangPID > Int64(Int32.max) {
            throw UsageError("--hang-redis takes the process id of a redis-server, got \(hangPID)")
        }
        guard let pem = FileManager.default.contents(atPath: keyPath) else {
            throw UsageError("cannot read --key \(keyPath)")
        }
        let key = TestSigningKey(
            keyID: try arguments.required("--kid"),
            privateKey: try RSAPrivateKey(pem: String(decoding: pem, as: UTF8.self)))

        let plan = Plan(
            client: FastCGIClient(.unixSocket(socketPath), timeout: requestTimeout), count: Int(count),
            concurrency: Int(concurrency))
        if let hangPID {
            return try runWithHangingRedis(
                plan: plan, redisPID: pid_t(hangPID), key: key, clientID: clientID, path: path)
        }
        let signStart = ContinuousClock.now
        let bodies = try signNotifications(plan: plan, key: key, clientID: clientID)
        let signSeconds = seconds(ContinuousClock.now - signStart)
        Output.line(
            "load: \(plan.count) requests per phase, \(plan.concurrency) client threads, one connection per request, "
                + "unix socket; \(plan.count) notifications signed beforehand in \(format(signSeconds, 2)) s")

        // Every request's parameters are built before the clock starts, as the bodies are.
        let healthParams = FastCGIClient.params(method: "GET", uri: "/healthz")
        let notificationParams = postParams(bodies, path: path)
        let baseline = plan.runPhase { _ in (healthParams, []) }
        let notifications = plan.runPhase { index in (notificationParams[index], bodies[index]) }

        report(baseline, label: "phase A (baseline, GET /healthz)")
        report(notifications, label: "phase B (notifications, POST \(path))")
        Output.line("ratio B/A of requests/s: \(format(notifications.rate / baseline.rate, 3))")
        return baseline.failures == 0 && notifications.failures == 0 ? .success : .failed
    }

    /// Phase A: notifications with Redis answering; phase B: as many while the Redis process
    /// is stopped. B/A is the capacity a hanging Redis leaves, B's p99 what a request waits.
    private static func runWithHangingRedis(
        plan: Plan, redisPID: pid_t, key: TestSigningKey, clientID: String, path: String
    ) throws -> ExitStatus {
        guard kill(redisPID, 0) == 0 else {
            throw UsageError("--hang-redis \(redisPID): no such process this user may signal")
        }
        let twice = Plan(client: plan.client, count: plan.count * 2, concurrency: plan.concurrency)
        let signStart = ContinuousClock.now
        let bodies = try signNotifications(plan: twice, key: key, clientID: clientID)
        Output.line(
            "load: \(plan.count) notifications per phase, \(plan.concurrency) client threads, one connection per "
                + "request, unix socket; \(twice.count) notifications signed beforehand in "
                + "\(format(seconds(ContinuousClock.now - signStart), 2)) s")
        let params = postParams(bodies, path: path)
        let answering = plan.runPhase { index in (params[index], bodies[index]) }
        kill(redisPID, SIGSTOP)
        let hanging = plan.runPhase { index in (params[plan.count + index], bodies[plan.count + index]) }
        kill(redisPID, SIGCONT)

        report(answering, label: "phase A (baseline, notifications, Redis answering)")
        report(hanging, label: "phase B (notifications, Redis stopped with SIGSTOP)")
        Output.line("ratio B/A of requests/s: \(format(hanging.rate / answering.rate, 3))")
        return answering.failures == 0 && hanging.failures == 0 ? .success : .failed
    }

    /// The FastCGI parameters of each notification POST, built before any clock starts.
    private static func postParams(_ bodies: [[UInt8]], path: String) -> [[(String, String)]] {
        bodies.indices.map { index in
            FastCGIClient.params(
                method: "POST", uri: path, body: bodies[index], contentType: "application/json",
                extra: [("REQUEST_ID", "load-\(index)")])
        }
    }

    /// Signs every body before the clock starts, spread over the client threads (RSA signing
    /// is the slow part of a test notification, and must not be counted as responder time).
    private static func signNotifications(plan: Plan, key: TestSigningKey, clientID: String) throws
        -> [[UInt8]]
    {
        // A run-unique subject prefix: a second run against the same Redis starts fresh users,
        // so its notifications are applied rather than stale.
        let runID = TestNotification.randomTokenID().filter { $0.isLetter || $0.isNumber }.prefix(12)
        let issuedAt = Int64(Date().timeIntervalSince1970) - 1
        let signed = try plan.runEach { index -> [UInt8] in
            let type = eventTypes[index % eventTypes.count]
            let isEmailEvent = type.hasPrefix("email-")
            let notification = TestNotification(
                type: type, subject: "001234.load\(runID).\(index)", clientID: clientID,
                email: isEmailEvent ? "load\(index)@privaterelay.appleid.com" : nil,
                isPrivateEmail: isEmailEvent ? true : nil, eventTimeMilliseconds: (issuedAt - 1) * 1000,
                issuedAt: issuedAt)
            return Array(try notification.requestBody(signedWith: key).utf8)
        }
        return signed
    }

    private static func report(_ result: PhaseResult, label: String) {
        Output.line(
            "\(label): requests=\(result.requests) seconds=\(format(result.seconds, 3)) "
                + "requests/s=\(format(result.rate, 1)) p50_ms=\(format(result.p50Milliseconds, 2)) "
                + "p99_ms=\(format(result.p99Milliseconds, 2)) non_2xx=\(result.failures)")
        let outcomes = result.outcomes.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        Output.line("  outcomes: \(outcomes.joined(separator: " "))")
        if let firstError = result.firstTransportError {
            Output.line("  first transport error: \(firstError)")
        }
    }

    /// A failure while preparing the run (signing), with the first error's text.
    struct LoadFailure: Error, CustomStringConvertible {
        let description: String
    }

    static func format(_ value: Double, _ digits: Int) -> String { String(format: "%.\(digits)f", value) }

    /// How many requests, over how many client threads, against which socket.
    struct Plan: Sendable {
        let client: FastCGIClient
        let count: Int
        let concurrency: Int

        /// Runs `work` for every index on `concurrency` threads (thread t takes t, t+C, t+2C, ...)
        /// and returns the results in index order; rethrows the first error.
        func runEach<Result: Sendable>(_ work: @escaping @Sendable (Int) throws -> Result) throws -> [Result] {
            let results = Shared<[Int: Result]>([:])
            let firstError = Shared<String?>(nil)
            let group = DispatchGroup()
            for thread in 0..<concurrency {
                group.enter()
                Thread { [count, concurrency] in
                    defer { group.leave() }
                    var local: [(Int, Result)] = []
                    do {
                        for index in stride(from: thread, to: count, by: concurrency) {
                            local.append((index, try work(index)))
                        }
                    } catch {
                        firstError.mutex.withLock { if $0 == nil { $0 = "\(error)" } }
                    }
                    results.mutex.withLock { all in for (index, value) in local { all[index] = value } }
                }.start()
            }
            group.wait()
            if let error = firstError.mutex.withLock({ $0 }) { throw LoadFailure(description: error) }
            return results.mutex.withLock { all in (0..<count).map { all[$0]! } }
        }

        /// Sends one request per index, timing each, and the phase as a whole.
        func runPhase(_ request: @escaping @Sendable (Int) -> (params: [(String, String)], body: [UInt8]))
            -> PhaseResult
        {
            let client = self.client
            let start = ContinuousClock.now
            // Transport errors are returned as values, so runEach never throws here.
            let samples =
                (try? runEach { index -> Sample in
                    let (params, body) = request(index)
                    let sent = ContinuousClock.now
                    do {
                        let response = try client.send(params: params, body: body)
                        return Sample(
                            latency: ContinuousClock.now - sent, status: response.status, body: response.body,
                            error: nil)
                    } catch {
                        return Sample(latency: ContinuousClock.now - sent, status: 0, body: [], error: "\(error)")
                    }
                }) ?? []
            return PhaseResult(samples: samples, elapsed: ContinuousClock.now - start)
        }
    }

    /// One request's latency and outcome.
    struct Sample: Sendable {
        let latency: Duration
        let status: Int
        let body: [UInt8]
        let error: String?
    }

    /// A phase's figures, computed after the clock stopped.
    struct PhaseResult {
        let requests: Int
        let seconds: Double
        let p50Milliseconds: Double
        let p99Milliseconds: Double
        /// Responses outside 2xx plus requests that got no response.
        let failures: Int
        /// `<HTTP status> <status field>[/<error field>]` (or `no-response`) to how many.
        let outcomes: [String: Int]
        let firstTransportError: String?

        var rate: Double { seconds > 0 ? Double(requests) / seconds : 0 }

        init(samples: [Sample], elapsed: Duration) {
            requests = samples.count
            seconds = LoadCommand.seconds(elapsed)
            let latencies = samples.map { LoadCommand.seconds($0.latency) * 1000 }.sorted()
            p50Milliseconds = Self.percentile(latencies, 0.50)
            p99Milliseconds = Self.percentile(latencies, 0.99)
            failures = samples.filter { !(200..<300).contains($0.status) }.count
            outcomes = samples.reduce(into: [:]) { counts, sample in counts[Self.outcome(sample), default: 0] += 1 }
            firstTransportError = samples.first { $0.error != nil }?.error
        }

        /// Nearest rank: the smallest latency with at least `fraction` of the samples at or below it.
        static func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
            guard !sorted.isEmpty else { return 0 }
            let rank = Int((fraction * Double(sorted.count)).rounded(.up))
            return sorted[min(max(rank, 1), sorted.count) - 1]
        }

        /// The responder's JSON `status` (and `error` code, never anything from a request).
        static func outcome(_ sample: Sample) -> String {
            guard sample.error == nil else { return "no-response" }
            guard case .object(let members)? = try? StrictJSONParser.parse(sample.body),
                case .string(let status)? = members["status"]
            else { return "\(sample.status)" }
            if case .string(let code)? = members["error"] { return "\(sample.status):\(status)/\(code)" }
            return "\(sample.status):\(status)"
        }
    }

    /// A value that threads fill in under a lock.
    final class Shared<Value: Sendable>: Sendable {
        let mutex: Mutex<Value>
        init(_ value: Value) { mutex = Mutex(value) }
    }

    static func seconds(_ duration: Duration) -> Double {
        duration.inSeconds
    }
}
