import Foundation
import SIWAFastCGIClient
import SIWARedis
import SIWATestKit
import Synchronization
import Testing

/// The fault-under-load harness the failover tests share: distinct signed notifications
/// posted to the real `serve` from several threads at a steady pace, a fault injected once
/// enough answers are in (the fault is the caller's closure), every non-200 answer retried
/// once after the load as Apple would (Apple is stood in for by the test), then the
/// contract checked on the primary: each notification answered 200 stored and its jti once
/// in the stream.
struct FaultUnderLoad {
    /// One notification signed for the run.
    struct Sent: Sendable {
        let sub: String
        let jti: String
        let body: [UInt8]
    }

    /// One answer: its notification's index, the HTTP status (nil when the request failed),
    /// the body's `status` field and when it came.
    struct Answer: Sendable {
        let index: Int
        let status: Int?
        let outcome: String?
        let at: ContinuousClock.Instant
    }

    /// What the load saw: every answer in order of arrival (the retries last), and how many
    /// notifications were retried and still failed on the retry.
    struct Outcome {
        var answers: [Answer] = []
        var retried = 0
        var stillFailingAfterRetry = 0
        /// When the load's first request was due.
        var loadStarted = ContinuousClock.now
        /// The indexes of the notifications answered 200, on the first try or the retry.
        var answeredOK: Set<Int> { Set(answers.filter { $0.status == 200 }.map(\.index)) }
    }

    /// The contract, read from the primary after the spool drained.
    struct Contract {
        /// Answered 200 and not the user's `last_jti`.
        var notStored: [String] = []
        /// Answered 200 and not in the stream.
        var notInStream: [String] = []
        /// How often each jti is in the stream.
        var timesInStream: [String: Int] = [:]
        /// Stream entries whose jti this run did not send.
        var unknownInStream = 0
        /// The jtis in the stream more than once.
        var repeatedInStream: [String] { timesInStream.filter { $0.value > 1 }.map(\.key) }
    }

    let stack: ServeStack
    let clients: Int
    let spacing: Duration
    let requestLabel: String
    let notifications: [Sent]

    /// Signs `count` distinct notifications (subjects `001.<subjectTag><run>.<index>`) for the
    /// stack's key from `clients` threads, before any clock starts: signing is the slow part.
    init(
        _ stack: ServeStack, count: Int, clients: Int, spacing: Duration, subjectTag: String, requestLabel: String
    ) throws {
        self.stack = stack
        self.clients = clients
        self.spacing = spacing
        self.requestLabel = requestLabel
        let key = stack.key
        let now = Int64(Date().timeIntervalSince1970)
        let runID = UUID().uuidString.prefix(8)
        let sent = Mutex<[Int: Sent]>([:])
        DispatchQueue.concurrentPerform(iterations: clients) { thread in
            for index in stride(from: thread, to: count, by: clients) {
                let notification = TestNotification(
                    type: index % 2 == 0 ? "consent-revoked" : "account-deleted",
                    subject: "001.\(subjectTag)\(runID).\(index)", clientID: ServeStack.clientID,
                    eventTimeMilliseconds: (now - 5) * 1000, issuedAt: now - 1)
                let body = Array((try? notification.requestBody(signedWith: key))?.utf8 ?? "".utf8)
                sent.withLock { $0[index] = Sent(sub: notification.subject, jti: notification.tokenID, body: body) }
            }
        }
        notifications = sent.withLock { dictionary in (0..<count).map { dictionary[$0]! } }
        try #require(notifications.allSatisfy { !$0.body.isEmpty })
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// Posts one notification over the stack's FastCGI socket, on a fresh connection.
    func post(_ index: Int) -> Answer {
        Self.post(notifications[index], index: index, socketPath: stack.socketPath, requestLabel: requestLabel)
    }

    static func post(_ sent: Sent, index: Int, socketPath: String, requestLabel: String) -> Answer {
        let params = FastCGIClient.params(
            method: "POST", uri: "/apple/notifications", body: sent.body, contentType: "application/json",
            extra: [("REQUEST_ID", "\(requestLabel)-\(index)")])
        let response = try? FastCGIClient(.unixSocket(socketPath), timeout: .seconds(10))
            .send(params: params, body: sent.body)
        return Answer(index: index, status: response?.status, outcome: response?.jsonFields["status"], at: .now)
    }

    /// Posts every notification, one per `spacing`, from `clients` threads; runs `fault` once
    /// `faultAfter` answers are in; waits up to `loadTimeout` seconds for the load to finish;
    /// then retries each non-200 once.
    func run(faultAfter: Int, loadTimeout: TimeInterval, _ fault: () throws -> Void) throws -> Outcome {
        let answers = Mutex<[Answer]>([])
        let group = DispatchGroup()
        var outcome = Outcome()
        let loadStarted = outcome.loadStarted
        let (notifications, clients, spacing) = (notifications, clients, spacing)
        let (socketPath, requestLabel) = (stack.socketPath, requestLabel)
        for thread in 0..<clients {
            group.enter()
            Thread {
                defer { group.leave() }
                for index in stride(from: thread, to: notifications.count, by: clients) {
                    // A paced load, so the fault lands mid-load.
                    let due = loadStarted + spacing * index
                    if due > .now { Thread.sleep(forTimeInterval: Self.seconds(due - .now)) }
                    let answer = Self.post(
                        notifications[index], index: index, socketPath: socketPath, requestLabel: requestLabel)
                    answers.withLock { $0.append(answer) }
                }
            }.start()
        }
        #expect(stack.waitUntil(timeout: 60) { answers.withLock { $0.count } >= faultAfter })
        try fault()
        #expect(
            group.wait(timeout: .now() + loadTimeout) == .success,
            "the load did not finish within \(Int(loadTimeout)) s")

        // Apple retries any non-200 answer: once, here, after the fault.
        outcome.answers = answers.withLock { $0 }
        let failed = outcome.answers.filter { $0.status != 200 }.map(\.index)
        outcome.retried = failed.count
        for index in failed {
            let answer = post(index)
            outcome.answers.append(answer)
            if answer.status != 200 { outcome.stillFailingAfterRetry += 1 }
        }
        return outcome
    }

    /// Waits up to `timeout` seconds for `/healthz` to answer 200 with an empty spool and,
    /// when `primary` names a port, to name that port as the Redis primary. Returns the port
    /// `primary` named last (nil without `primary`) and whether the spool drained.
    func waitForDrain(timeout: TimeInterval, primary: (() -> Int?)? = nil) throws -> (drained: Bool, port: Int?) {
        var port: Int?
        let drained = try stack.waitUntil(timeout: timeout) {
            if let primary {
                guard let named = primary() else { return false }
                port = named
            }
            let health = try stack.health()
            return health.status == 200 && health.jsonFields["spool_depth"] == "0"
                && (port.map { health.jsonFields["redis_primary"] == "127.0.0.1:\($0)" } ?? true)
        }
        return (drained, port)
    }

    /// Reads the contract from `connection` (keys under `keyPrefix`: `siwa`, or `{siwa}` in a
    /// cluster): the user hash and the stream entry of every notification answered 200.
    func contract(_ outcome: Outcome, on connection: RedisConnection, keyPrefix: String = "siwa") throws -> Contract {
        var contract = Contract()
        let answeredOK = outcome.answeredOK
        for index in answeredOK.sorted() {
            let stored = try connection.command(
                "HGET", "\(keyPrefix):user:{\(ServeStack.clientID):\(notifications[index].sub)}", "last_jti"
            ).string
            if stored != notifications[index].jti { contract.notStored.append(notifications[index].sub) }
        }
        for entry in try connection.command("XRANGE", "\(keyPrefix):events", "-", "+").array ?? [] {
            if let fields = entry.array?.last?.fieldMap, let jti = fields["jti"] {
                contract.timesInStream[jti, default: 0] += 1
            }
        }
        let ours = Set(notifications.map(\.jti))
        contract.unknownInStream = contract.timesInStream.keys.filter { !ours.contains($0) }.count
        for index in answeredOK where contract.timesInStream[notifications[index].jti] == nil {
            contract.notInStream.append(notifications[index].sub)
        }
        return contract
    }

    static func metric(_ text: String, _ name: String) -> Int {
        let line = text.split(separator: "\n").first { $0.hasPrefix(name + " ") } ?? ""
        return Int(line.split(separator: " ").last ?? "") ?? -1
    }
}
