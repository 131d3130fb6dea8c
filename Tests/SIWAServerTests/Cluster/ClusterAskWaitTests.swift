import Foundation
import SIWARedis
import SIWAStore
import SIWAVerification
import Testing

/// `WAIT` after a write that a slot migration sent elsewhere (`ASK`): the replicas counted
/// are those of the node that ran the write, the migration's target, not those of the
/// source the connection was on. A real cluster on loopback; the slot is left half-moved
/// (`MIGRATING` on the source, `IMPORTING` on the target, every key already moved), as it
/// is during a reshard. The source answers `ASK` to a script none of whose keys it holds,
/// and the target runs it only when it holds them all (else `TRYAGAIN`): a re-post of a
/// notification already there, whose `duplicate` is confirmed by a `PUBLISH` and `WAIT`.
@Suite("Redis Cluster: WAIT after ASK counts the replicas of the node that ran the write", .serialized)
struct ClusterAskWaitTests {
    static let replicaTimeout = Duration.milliseconds(1500)

    static func notification(_ subject: String, rawType: String) -> VerifiedNotification {
        VerifiedNotification(
            clientID: "com.example.app", subject: subject, type: NotificationEventType(rawType: rawType),
            rawType: rawType, eventTimeMilliseconds: 1_670_016_125_295, tokenID: "jti-\(subject)",
            issuedAt: 1_670_016_000, expiresAt: nil, email: nil, isPrivateEmail: nil)
    }

    /// The node replicating the primary on `port` (ROLE names it), or nil.
    static func replica(of port: Int, in cluster: RedisClusterNodes) -> RedisSentinelCluster.Node? {
        cluster.nodes.first { node in
            let role = (try? cluster.connection(port: node.port).command("ROLE"))?.array ?? []
            return role.first?.string == "slave" && role.count > 2 && role[2].integer == Int64(port)
        }
    }

    @Test(
        "SIWA_REDIS_MIN_REPLICAS=1 during a migration: a write run on the target through ASK is counted there (no spurious shortfall from the source's paused replica, no hidden one from the target's)"
    )
    func waitFollowsTheAsk() throws {
        let cluster = try RedisClusterNodes()
        defer { cluster.shutdown() }
        let source = try #require(cluster.slotOwnerPort())
        let target = try #require(cluster.nodes.map(\.port).first { $0 != source && cluster.role(of: $0) == "master" })
        let sourceReplica = try #require(Self.replica(of: source, in: cluster))
        let targetReplica = try #require(Self.replica(of: target, in: cluster))
        defer {
            sourceReplica.resume()
            targetReplica.resume()
        }
        let locator = RedisClusterLocator(
            seeds: cluster.nodes.map { RedisClusterLocator.Node(host: "127.0.0.1", port: $0.port) },
            hashTagKey: "{siwa}:events", endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)),
            timeout: .seconds(2))
        let store = NotificationStore(
            connection: RedisConnection(
                endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)), connectTimeout: .seconds(1),
                commandTimeout: .seconds(5), locator: .cluster(locator)),
            keyPrefix: RedisClusterNodes.keyPrefix, minimumReplicas: 1, replicaTimeout: Self.replicaTimeout)
        // An account deletion first: the deletions queue, the script's fourth key, exists.
        let deleted = Self.notification("001.ask.1", rawType: "account-deleted")
        let revoked = Self.notification("001.ask.2", rawType: "consent-revoked")
        func apply(_ notification: VerifiedNotification) throws -> NotificationStore.Acknowledged {
            try store.applyAcknowledged(notification, receivedAt: 1_700_000_000_000)
        }

        // On the source, before the move: its replica acknowledges; paused, it cannot (a real shortfall).
        #expect(try apply(deleted) == .init(outcome: .applied, replicas: 1, isShortfall: false))
        sourceReplica.pause()
        #expect(try apply(revoked) == .init(outcome: .applied, replicas: 0, isShortfall: true))

        // The slot half-moved: every key on the target, the slot still the source's.
        let slot = String(RedisClusterNodes.slot)
        let sourceConnection = cluster.connection(port: source)
        _ = try cluster.connection(port: target).command(
            "CLUSTER", "SETSLOT", slot, "IMPORTING", try cluster.nodeID(port: source))
        _ = try sourceConnection.command("CLUSTER", "SETSLOT", slot, "MIGRATING", try cluster.nodeID(port: target))
        let keys = (try sourceConnection.command("CLUSTER", "GETKEYSINSLOT", slot, "100").array ?? []).compactMap(
            \.string)
        #expect(keys.count == 6, "two user hashes, two seen markers, the stream, the deletions queue: \(keys)")
        #expect(
            try sourceConnection.command(["MIGRATE", "127.0.0.1", String(target), "", "0", "5000", "KEYS"] + keys)
                .string == "OK")

        // A new notification runs nowhere while the slot moves (its seen marker would be a new
        // key on the target): TRYAGAIN, which serve spools, and nothing written.
        let newcomer = Self.notification("001.ask.3", rawType: "consent-revoked")
        let refused = #expect(throws: RedisError.self) { try apply(newcomer) }
        #expect(
            refused?.code == .serverError && refused?.message.hasPrefix("TRYAGAIN") == true,
            "\(String(describing: refused))")

        // A re-post is answered ASK and runs on the target, whose replica is healthy: no
        // shortfall, though the source's replica (the connection's own node) is still paused.
        #expect(try apply(deleted) == .init(outcome: .duplicate, replicas: 1, isShortfall: false))

        // The other way round: the source's replica back, the target's paused. The write on the
        // target is not replicated, and that is said, whatever the source's replica holds.
        sourceReplica.resume()
        try cluster.waitUntil(timeout: 30) {
            (try? sourceConnection.command("WAIT", "1", "100").integer) == 1
        }
        targetReplica.pause()
        #expect(try apply(revoked) == .init(outcome: .duplicate, replicas: 0, isShortfall: true))
        // Four ASKs: the newcomer's, and the first re-post's twice (its EVALSHA met NOSCRIPT on the
        // target and was sent again as EVAL).
        #expect(locator.asks == 4)

        // The keys are on the target (read there with ASKING), the re-posts added nothing; none on the source.
        let targetConnection = cluster.connection(port: target)
        _ = try targetConnection.command("ASKING")
        #expect(try targetConnection.command("XLEN", "{siwa}:events").integer == 2)
        _ = try targetConnection.command("ASKING")  // for one command only
        let newcomerKey = store.keys.user(clientID: "com.example.app", subject: "001.ask.3")
        #expect(try targetConnection.command("EXISTS", newcomerKey).integer == 0)
        #expect(try sourceConnection.command("CLUSTER", "COUNTKEYSINSLOT", slot).integer == 0)
    }

    @Test(
        "WAIT after the slot moved on since the write (MOVED met by another connection): refused, never counted on the new owner"
    )
    func waitNeverGoesToAnotherNode() throws {
        let cluster = try RedisClusterNodes()
        defer { cluster.shutdown() }
        let source = try #require(cluster.slotOwnerPort())
        let target = try #require(cluster.nodes.map(\.port).first { $0 != source && cluster.role(of: $0) == "master" })
        let locator = RedisClusterLocator(
            seeds: cluster.nodes.map { RedisClusterLocator.Node(host: "127.0.0.1", port: $0.port) },
            hashTagKey: "{siwa}:events", endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)),
            timeout: .seconds(2))
        func connection() -> RedisConnection {
            RedisConnection(
                endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)), connectTimeout: .seconds(1),
                commandTimeout: .seconds(5), locator: .cluster(locator))
        }
        let writer = connection()
        #expect(try writer.command("SET", "{siwa}:probe", "1").string == "OK")
        #expect(writer.clusterNode == RedisClusterLocator.Node(host: "127.0.0.1", port: source))

        try cluster.migrateSlot(from: source, to: target, batchPause: 0)
        // Another connection meets MOVED and the locator learns the new owner.
        #expect(try connection().command("GET", "{siwa}:probe").string == "1")
        #expect(locator.current == RedisClusterLocator.Node(host: "127.0.0.1", port: target))

        // The writer's WAIT would count the new owner's replicas on a fresh connection, which
        // wrote nothing: refused instead, so the caller keeps a copy.
        let refused = #expect(throws: RedisError.self) { try writer.commandAboutLastWrite("WAIT", "1", "500") }
        #expect(refused?.code == .connectionLost, "\(String(describing: refused))")
        #expect(!writer.isConnected)
    }

    @Test(
        "an ASK counts once followed (the target answered the command, TRYAGAIN included), never when the target cannot be reached"
    )
    func askCountedOnceFollowed() throws {
        let cluster = try RedisClusterNodes()
        defer { cluster.shutdown() }
        let source = try #require(cluster.slotOwnerPort())
        let target = try #require(cluster.nodes.map(\.port).first { $0 != source && cluster.role(of: $0) == "master" })
        let locator = RedisClusterLocator(
            seeds: cluster.nodes.map { RedisClusterLocator.Node(host: "127.0.0.1", port: $0.port) },
            hashTagKey: "{siwa}:events", endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)),
            timeout: .seconds(2))
        let connection = RedisConnection(
            endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)), connectTimeout: .seconds(1),
            commandTimeout: .seconds(5), locator: .cluster(locator))
        #expect(try connection.command("SET", "{siwa}:probe", "1").string == "OK")

        // The slot half-moved, the one key already on the target.
        let slot = String(RedisClusterNodes.slot)
        let sourceConnection = cluster.connection(port: source)
        _ = try cluster.connection(port: target).command(
            "CLUSTER", "SETSLOT", slot, "IMPORTING", try cluster.nodeID(port: source))
        _ = try sourceConnection.command("CLUSTER", "SETSLOT", slot, "MIGRATING", try cluster.nodeID(port: target))
        #expect(
            try sourceConnection.command(
                "MIGRATE", "127.0.0.1", String(target), "", "0", "5000", "KEYS", "{siwa}:probe"
            )
            .string == "OK")

        // Followed, answered by the target: counted.
        #expect(try connection.command("GET", "{siwa}:probe").string == "1")
        #expect(locator.asks == 1)
        // Followed, and the target answers TRYAGAIN (one key there, one not): counted too.
        let retryLater = #expect(throws: RedisError.self) {
            try connection.command("MGET", "{siwa}:probe", "{siwa}:absent")
        }
        #expect(retryLater?.code == .serverError && retryLater?.message.hasPrefix("TRYAGAIN") == true)
        #expect(locator.asks == 2)

        // The target gone: the source still answers ASK, the follow fails, nothing counted.
        try #require(cluster.node(port: target)).kill()
        let unreachable = #expect(throws: RedisError.self) { try connection.command("GET", "{siwa}:probe") }
        #expect(unreachable?.code != .serverError, "\(String(describing: unreachable))")
        #expect(locator.asks == 2)
    }

    /// The connections a node has accepted since it started (`INFO stats`).
    static func connectionsReceived(_ connection: RedisConnection) throws -> Int? {
        let stats = try connection.command("INFO", "stats").string ?? ""
        let line = stats.split(whereSeparator: \.isNewline).first { $0.hasPrefix("total_connections_received:") }
        return line.flatMap { Int($0.split(separator: ":").last ?? "") }
    }

    @Test(
        "while the slot moves, the ASKs to one target share one connection to it, closed at MOVED once the slot settles"
    )
    func oneConnectionPerMigrationTarget() throws {
        let cluster = try RedisClusterNodes()
        defer { cluster.shutdown() }
        let source = try #require(cluster.slotOwnerPort())
        let target = try #require(cluster.nodes.map(\.port).first { $0 != source && cluster.role(of: $0) == "master" })
        let locator = RedisClusterLocator(
            seeds: cluster.nodes.map { RedisClusterLocator.Node(host: "127.0.0.1", port: $0.port) },
            hashTagKey: "{siwa}:events", endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)),
            timeout: .seconds(2))
        let connection = RedisConnection(
            endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)), connectTimeout: .seconds(1),
            commandTimeout: .seconds(5), locator: .cluster(locator))
        #expect(try connection.command("SET", "{siwa}:probe", "1").string == "OK")
        let slot = String(RedisClusterNodes.slot)
        let sourceConnection = cluster.connection(port: source)
        _ = try cluster.connection(port: target).command(
            "CLUSTER", "SETSLOT", slot, "IMPORTING", try cluster.nodeID(port: source))
        _ = try sourceConnection.command("CLUSTER", "SETSLOT", slot, "MIGRATING", try cluster.nodeID(port: target))
        #expect(
            try sourceConnection.command(
                "MIGRATE", "127.0.0.1", String(target), "", "0", "5000", "KEYS", "{siwa}:probe"
            )
            .string == "OK")

        // The target's own count, read on one connection of the test's (counted before the first read).
        let targetStats = cluster.connection(port: target)
        let before = try #require(try Self.connectionsReceived(targetStats))
        for _ in 0..<5 { #expect(try connection.command("GET", "{siwa}:probe").string == "1") }
        #expect(locator.asks == 5)
        #expect(try Self.connectionsReceived(targetStats) == before + 1, "one connection for five ASKs")

        // The slot settles on the target: the next command meets MOVED and goes to the target as
        // the owner; the migration connection is closed (the target keeps the test's and the owner's).
        _ = try cluster.connection(port: target).command(
            "CLUSTER", "SETSLOT", slot, "NODE", try cluster.nodeID(port: target))
        _ = try sourceConnection.command("CLUSTER", "SETSLOT", slot, "NODE", try cluster.nodeID(port: target))
        #expect(try connection.command("GET", "{siwa}:probe").string == "1")
        #expect(locator.moves == 1 && locator.asks == 5)
        try cluster.waitUntil(timeout: 20) {
            let clients = (try? targetStats.command("CLIENT", "LIST", "TYPE", "NORMAL").string) ?? ""
            return clients.split(whereSeparator: \.isNewline).count == 2
        }
    }
}
