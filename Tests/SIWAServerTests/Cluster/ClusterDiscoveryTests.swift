import Foundation
import SIWARedis
import SIWASupport
import Synchronization
import Testing

@testable import SIWASpool
@testable import SIWAStore
@testable import SIWATelemetry

/// How the endpoint finds the slot's owner in a real Redis Cluster on loopback (one
/// cluster for every case below, to keep the suite short): the owner a node names is
/// confirmed before it is used, a node with a stale view is passed over, the connection
/// refuses a node that is not a master, and a cluster that announces no endpoints is usable.
@Suite("Redis Cluster: discovery confirms what a node names", .serialized)
struct ClusterDiscoveryTests {
    static func locator(
        _ seeds: [Int], observer: @escaping @Sendable (RedisClusterLocator.Event) -> Void = { _ in }
    ) -> RedisClusterLocator {
        RedisClusterLocator(
            seeds: seeds.map { RedisClusterLocator.Node(host: "127.0.0.1", port: $0) },
            hashTagKey: "{siwa}:events", endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)),
            timeout: .seconds(2), observer: observer)
    }

    static func connection(_ locator: RedisClusterLocator) -> RedisConnection {
        RedisConnection(
            endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: 1)), connectTimeout: .seconds(2),
            commandTimeout: .seconds(2), locator: .cluster(locator))
    }

    @Test(
        "a stale seed first (it names a dead owner): the next node's owner used in the same discovery, the stale seed moved to the back and reported; serve applies with it first; a replica named by MOVED refused by ROLE; a cluster announcing no endpoints (NULL host in CLUSTER SLOTS, `MOVED slot :port`) used"
    )
    func discoveryConfirmsTheOwner() throws {
        let cluster = try RedisClusterNodes()
        defer { cluster.shutdown() }
        let owner = try #require(cluster.slotOwnerPort())
        let ports = cluster.nodes.map(\.port)
        let (stale, dead) = try cluster.staleSeed()

        // 1. The stale seed first: one discovery passes over it to the next node's owner.
        let events = Mutex<[RedisClusterLocator.Event]>([])
        let locator = Self.locator([stale] + ports) { event in events.withLock { $0.append(event) } }
        let found = try locator.discover()
        #expect(found == RedisClusterLocator.Node(host: "127.0.0.1", port: owner))
        #expect(locator.discoveries == 1)
        #expect(locator.seeds.last == RedisClusterLocator.Node(host: "127.0.0.1", port: stale))
        let seen = events.withLock { $0 }
        if case .nodeNamedUnusableOwner(let node, let named, _)? = seen.first {
            #expect(node.port == stale)
            #expect(named.port == dead)
        } else {
            Issue.record("no stale node reported: \(seen)")
        }
        if case .primaryFound(_, let primary, _)? = seen.last {
            #expect(primary.port == owner)
        } else {
            Issue.record("no primary found reported: \(seen)")
        }
        // The next discovery asks a node with a good view first.
        #expect(try locator.discover().port == owner)
        #expect(events.withLock { $0 }.count == seen.count + 1)

        // 2. serve with the stale seed first: applied, and the log says which node named what.
        var environment = ClusterServeTests.environment(
            cluster, seeds: (["127.0.0.1:\(stale)"] + ports.map { "127.0.0.1:\($0)" }).joined(separator: ","))
        environment["SIWA_REDIS_TIMEOUT_MS"] = "1000"
        do {
            let stack = try ServeStack(extraEnvironment: environment)
            defer { stack.shutdown() }
            let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.stale.1"))
            #expect(response.status == 200)
            #expect(response.jsonFields["status"] == "applied", "\(response.bodyText)")
            let log = try #require(stack.serve).logText
            #expect(log.contains(#""event":"redis_cluster_node_stale""#), "\(log.suffix(2000))")
            #expect(log.contains(#""named":"127.0.0.1:\#(dead)""#), "\(log.suffix(2000))")
            #expect(try stack.health().jsonFields["redis_primary"] == "127.0.0.1:\(owner)")
        }

        // 3. MOVED naming a replica (a view from before a failover): ROLE refuses it, the
        // cluster is asked again, and the command runs on the primary.
        let replica = try #require(ClusterAskWaitTests.replica(of: owner, in: cluster)?.port)
        let moved = Self.locator(ports)
        moved.moved(to: RedisClusterLocator.Node(host: "127.0.0.1", port: replica))
        let onReplica = Self.connection(moved)
        #expect(try onReplica.command("ROLE").array?.first?.string == "master")
        #expect(onReplica.clusterNode?.port == owner)
        #expect(moved.discoveries == 1)

        // 4. No endpoint announced: CLUSTER SLOTS names every node with a NULL host (the node
        // asked), MOVED with an empty host (the connection's).
        for port in ports {
            _ = try cluster.connection(port: port).command(
                "CONFIG", "SET", "cluster-preferred-endpoint-type", "unknown-endpoint")
        }
        let slots = try cluster.connection(port: owner).command("CLUSTER", "SLOTS").array ?? []
        #expect(slots.allSatisfy { $0.array?[2].array?.first == RedisReply.null }, "\(slots.prefix(1))")
        let unknown = Self.locator(ports)
        #expect(try unknown.discover() == RedisClusterLocator.Node(host: "127.0.0.1", port: owner))
        let otherMaster = try #require(ports.first { $0 != owner && cluster.role(of: $0) == "master" })
        do {
            _ = try cluster.connection(port: otherMaster).command("SET", "{siwa}:probe", "1")
            Issue.record("a node that does not own the slot took the write")
        } catch {
            #expect(error.message == "MOVED \(RedisClusterNodes.slot) :\(owner)")
        }
        unknown.moved(to: RedisClusterLocator.Node(host: "127.0.0.1", port: otherMaster))
        let redirected = Self.connection(unknown)
        #expect(try redirected.command("SET", "{siwa}:probe", "1").string == "OK")
        #expect(redirected.clusterNode?.port == owner)
        #expect(unknown.moves == 2)

        // 5. A slot move left half done (MIGRATING/IMPORTING set, the keys moved, the slot never
        // given): the replay waits quietly for `stuckSlotMoveBound` of TRYAGAIN on the
        // replayer's clock, then is reported blocked (/healthz 503 names it); given, it drains.
        let slot = String(RedisClusterNodes.slot)
        let source = cluster.connection(port: owner)
        let target = cluster.connection(port: otherMaster)
        _ = try target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", try cluster.nodeID(port: owner))
        _ = try source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", try cluster.nodeID(port: otherMaster))
        let keys = (try source.command("CLUSTER", "GETKEYSINSLOT", slot, "100").array ?? []).compactMap(\.string)
        #expect(
            try source.command(["MIGRATE", "127.0.0.1", String(otherMaster), "", "0", "5000", "KEYS"] + keys).string
                == "OK")
        let offset = Mutex(Duration.zero)
        let clock = EndpointClock(
            monotonic: { ContinuousClock.now + offset.withLock { $0 } },
            wallMilliseconds: EndpointClock.system.wallMilliseconds)
        let spoolDirectory = cluster.directory.appendingPathComponent("spool").path
        let spool = try NotificationSpool(directory: spoolDirectory)
        let replayer = SpoolReplayer(
            spool: spool, rejected: try SpoolSetAsideStore(spoolDirectory: spoolDirectory),
            store: NotificationStore(
                connection: Self.connection(Self.locator(ports)), keyPrefix: RedisClusterNodes.keyPrefix),
            metrics: ServerMetrics(), clientIDs: [ServeStack.clientID], clock: clock)
        try spool.append(ClusterAskWaitTests.notification("001.stuck.1", rawType: "consent-revoked"))
        func replayMetTryAgain() -> Bool {
            guard case .redis(let error)? = replayer.replayOnce().stop else { return false }
            return error.message.hasPrefix("TRYAGAIN")
        }
        #expect(replayMetTryAgain())
        #expect(replayer.blockedReason == nil)
        offset.withLock { $0 += SpoolReplayer.stuckSlotMoveBound - .seconds(1) }
        #expect(replayMetTryAgain())
        #expect(replayer.blockedReason == nil, "blocked before the bound")
        offset.withLock { $0 += .seconds(2) }
        #expect(replayMetTryAgain())
        let blocked = replayer.blockedReason ?? ""
        #expect(blocked.contains("slot move") && blocked.contains("TRYAGAIN"), "\(blocked)")
        let targetID = try cluster.nodeID(port: otherMaster)
        _ = try target.command("CLUSTER", "SETSLOT", slot, "NODE", targetID)
        _ = try source.command("CLUSTER", "SETSLOT", slot, "NODE", targetID)
        #expect(replayer.replayOnce().stop == nil)
        #expect(replayer.blockedReason == nil)
        #expect(spool.depth == 0)
    }

    @Test("MOVED and ASK: an empty host is the connection's host, `?` names no node (the cluster is asked again)")
    func redirectHosts() {
        typealias Redirect = RedisClusterLocator.Redirect
        let node = { (host: String, port: Int) in RedisClusterLocator.Node(host: host, port: port) }
        #expect(Redirect(reply: "MOVED 3999 :6381", connectionHost: "10.0.0.5") == .moved(node("10.0.0.5", 6381)))
        #expect(Redirect(reply: "ASK 3999 :6381", connectionHost: "10.0.0.5") == .ask(node("10.0.0.5", 6381)))
        #expect(Redirect(reply: "MOVED 3999 ?:6381", connectionHost: "10.0.0.5") == .unknownNode)
        #expect(Redirect(reply: "MOVED 3999 [::1]:6381", connectionHost: "x") == .moved(node("::1", 6381)))
        #expect(Redirect(reply: "MOVED 3999 a.example:6381", connectionHost: "x") == .moved(node("a.example", 6381)))
        #expect(Redirect(reply: "MOVED 3999 :0", connectionHost: "x") == nil)
        #expect(Redirect(reply: "MOVED 3999", connectionHost: "x") == nil)
        #expect(Redirect(reply: "ERR MOVED 1 a:1", connectionHost: "x") == nil)
    }
}
