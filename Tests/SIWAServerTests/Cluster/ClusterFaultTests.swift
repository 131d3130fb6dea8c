import Foundation
import SIWAFastCGIClient
import SIWARedis
import SIWAServer
import SIWATestKit
import Synchronization
import Testing

/// The real `serve` against a real Redis Cluster on loopback under load, while the
/// cluster changes under it: the slot's primary SIGKILLed (a replica takes over), and
/// the slot migrated to another primary (`ASK` during the move, `MOVED` after); each over
/// plain TCP and over TLS only (`--tls-cluster yes`: clients, the cluster bus, replication
/// and `MIGRATE` all on TLS). Apple is stood in for by the test: a non-2xx answer is
/// retried once, after the change.
@Suite("Redis Cluster: failover and migration under load", .serialized)
struct ClusterFaultTests {
    static let count = 600
    static let clients = 6
    static let spacing = Duration.milliseconds(8)

    struct Sent: Sendable {
        let sub: String
        let jti: String
        let body: [UInt8]
    }

    /// Signs `count` distinct notifications for the stack's key.
    static func sign(_ stack: ServeStack) throws -> [Sent] {
        let key = stack.key
        let now = Int64(Date().timeIntervalSince1970)
        let runID = UUID().uuidString.prefix(8)
        let sent = Mutex<[Int: Sent]>([:])
        DispatchQueue.concurrentPerform(iterations: clients) { thread in
            for index in stride(from: thread, to: count, by: clients) {
                let notification = TestNotification(
                    type: index % 2 == 0 ? "consent-revoked" : "account-deleted", subject: "001.cl\(runID).\(index)",
                    clientID: ServeStack.clientID, eventTimeMilliseconds: (now - 5) * 1000, issuedAt: now - 1)
                let body = Array((try? notification.requestBody(signedWith: key))?.utf8 ?? "".utf8)
                sent.withLock { $0[index] = Sent(sub: notification.subject, jti: notification.tokenID, body: body) }
            }
        }
        let notifications = sent.withLock { dictionary in (0..<count).map { dictionary[$0]! } }
        try #require(notifications.allSatisfy { !$0.body.isEmpty })
        return notifications
    }

    static func post(_ socketPath: String, _ sent: Sent, _ index: Int) -> Int? {
        let params = FastCGIClient.params(
            method: "POST", uri: "/apple/notifications", body: sent.body, contentType: "application/json",
            extra: [("REQUEST_ID", "cluster-\(index)")])
        return
            (try? FastCGIClient(.unixSocket(socketPath), timeout: .seconds(10)).send(
                params: params, body: sent.body))?.status
    }

    /// Posts every notification, paced, from `clients` threads; runs `fault` once
    /// `faultAfter` answers are in; retries each non-200 once after; waits for the spool to
    /// drain; then checks every notification answered 200 is on the slot's owner, its jti
    /// once in the stream. Returns the /metrics text.
    static func run(
        _ cluster: RedisClusterNodes, _ stack: ServeStack, faultAfter: Int, _ fault: () throws -> Void
    ) throws -> String {
        let notifications = try sign(stack)
        let answers = Mutex<[Int: Int?]>([:])
        let socketPath = stack.socketPath
        let group = DispatchGroup()
        let started = ContinuousClock.now
        for thread in 0..<clients {
            group.enter()
            Thread {
                defer { group.leave() }
                for index in stride(from: thread, to: count, by: clients) {
                    let due = started + spacing * index
                    if due > .now { Thread.sleep(forTimeInterval: SentinelFailoverTests.seconds(due - .now)) }
                    let status = post(socketPath, notifications[index], index)
                    answers.withLock { $0[index] = status }
                }
            }.start()
        }
        #expect(stack.waitUntil(timeout: 60) { answers.withLock { $0.count } >= faultAfter })
        try fault()
        #expect(group.wait(timeout: .now() + 120) == .success, "the load did not finish within 120 s")

        var final = answers.withLock { $0 }
        let failed = final.filter { $0.value != 200 }.map(\.key)
        for index in failed { final[index] = post(socketPath, notifications[index], index) }
        #expect(
            final.values.allSatisfy { $0 == 200 },
            "still failing after one retry: \(final.filter { $0.value != 200 }.count)")

        let drained = try stack.waitUntil(timeout: 90) {
            let health = try stack.request("GET", "/healthz")
            return health.status == 200 && health.jsonFields["spool_depth"] == "0"
        }
        let health = try stack.request("GET", "/healthz").jsonFields
        #expect(drained, "the spool did not drain: \(health)")

        let owner = try cluster.ownerConnection()
        var lost: [String] = []
        for (index, status) in final where status == 200 {
            let stored = try owner.command(
                "HGET", "{siwa}:user:{\(ServeStack.clientID):\(notifications[index].sub)}", "last_jti"
            ).string
            if stored != notifications[index].jti { lost.append(notifications[index].sub) }
        }
        var seen: [String: Int] = [:]
        for entry in try owner.command("XRANGE", "{siwa}:events", "-", "+").array ?? [] {
            if let fields = entry.array?.last?.fieldMap, let jti = fields["jti"] { seen[jti, default: 0] += 1 }
        }
        #expect(lost.count == 0, "answered 200 and missing: \(lost.count), for example \(lost.prefix(3))")
        #expect(
            seen.filter { $0.value != 1 }.isEmpty,
            "in the stream other than once: \(seen.filter { $0.value != 1 }.count)")
        #expect(seen.count == count)
        print("cluster fault run: \(count) notifications, non-200 retried once: \(failed.count)")
        return String(decoding: try stack.request("GET", "/metrics").body, as: UTF8.self)
    }

    static func metric(_ text: String, _ name: String) -> Int {
        let line = text.split(separator: "\n").first { $0.hasPrefix(name + " ") } ?? ""
        return Int(line.split(separator: " ").last ?? "") ?? -1
    }

    @Test(
        "the slot's primary SIGKILLed under load: every 200 is on the new primary, its jti once in the stream",
        arguments: RedisClusterNodes.Transport.allCases)
    func primaryKilled(_ transport: RedisClusterNodes.Transport) throws {
        let cluster = try RedisClusterNodes(transport: transport)
        defer { cluster.shutdown() }
        var environment = ClusterServeTests.environment(cluster)
        environment["SIWA_REDIS_MIN_REPLICAS"] = "1"
        environment["SIWA_REDIS_REPLICA_TIMEOUT_MS"] = "200"
        environment["SIWA_REDIS_TIMEOUT_MS"] = "1000"
        environment["SIWA_WORKERS"] = String(Self.clients)
        let stack = try ServeStack(extraEnvironment: environment)
        defer { stack.shutdown() }
        let oldOwner = try #require(cluster.slotOwnerPort())
        let metrics = try Self.run(cluster, stack, faultAfter: 150) {
            cluster.node(port: oldOwner)?.kill()
            try cluster.waitUntil(timeout: 60) {
                guard let port = cluster.slotOwnerPort(), port != oldOwner else { return false }
                return cluster.role(of: port) == "master"
            }
            // The lost machine comes back and rejoins as the new primary's replica: until then
            // the new primary has none, and with SIWA_REDIS_MIN_REPLICAS=1 each write stays
            // spooled (a shortfall), as it must.
            try cluster.node(port: oldOwner)?.start()
            try cluster.waitUntil(timeout: 60) { cluster.role(of: oldOwner) == "slave" }
        }
        let newOwner = try #require(cluster.slotOwnerPort())
        #expect(newOwner != oldOwner)
        #expect(try stack.request("GET", "/healthz").jsonFields["redis_primary"] == "127.0.0.1:\(newOwner)")
        #expect(Self.metric(metrics, "siwa_redis_cluster_primary_changes_total") >= 1, "\(metrics)")
    }

    @Test(
        "the slot migrated to another primary under load: ASK followed during the move, MOVED after",
        arguments: RedisClusterNodes.Transport.allCases)
    func slotMigrated(_ transport: RedisClusterNodes.Transport) throws {
        let cluster = try RedisClusterNodes(transport: transport)
        defer { cluster.shutdown() }
        var environment = ClusterServeTests.environment(cluster)
        environment["SIWA_WORKERS"] = String(Self.clients)
        let stack = try ServeStack(extraEnvironment: environment)
        defer { stack.shutdown() }
        let source = try #require(cluster.slotOwnerPort())
        let ports = cluster.nodes.map(\.port)
        let target = try #require(ports.first { $0 != source && cluster.role(of: $0) == "master" })
        let metrics = try Self.run(cluster, stack, faultAfter: 150) {
            try cluster.migrateSlot(from: source, to: target, batchPause: 0.2)
        }
        #expect(cluster.slotOwnerPort() == target)
        #expect(Self.metric(metrics, "siwa_redis_cluster_ask_total") >= 1, "\(metrics)")
        // ASK followed, not only counted: the target received `ASKING` (serve is its only
        // client that sends it), over the transport under test.
        let commands = try cluster.connection(port: target).command("INFO", "commandstats").string ?? ""
        let asking = commands.split(whereSeparator: \.isNewline).first { $0.hasPrefix("cmdstat_asking:") }
        let askingCalls = asking.flatMap { line in
            line.split(separator: ",").first.flatMap { Int($0.split(separator: "=").last ?? "") }
        }
        #expect((askingCalls ?? 0) >= 1, "the target's commandstats: \(asking.map(String.init) ?? "no ASKING")")
        #expect(Self.metric(metrics, "siwa_redis_cluster_moved_total") >= 1, "\(metrics)")
    }
}
