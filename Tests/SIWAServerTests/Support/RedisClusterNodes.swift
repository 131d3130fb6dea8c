import Foundation
import SIWARedis
import Testing

/// A real Redis Cluster on loopback: six `redis-server --cluster-enabled yes` on free
/// ports (3 primaries, 3 replicas), joined by `redis-cli --cluster create ...
/// --cluster-replicas 1 --cluster-yes`; with `SIWA_TEST_REDIS_SERVER=valkey`, the same of
/// `valkey-server` and `valkey-cli`. With `tls`, every node listens with TLS only and
/// the cluster bus and replication run over TLS (`--tls-cluster yes`). No persistence.
/// Always call `shutdown()`.
final class RedisClusterNodes: @unchecked Sendable {
    struct StartError: Error, CustomStringConvertible { let description: String }

    let directory: URL
    let nodes: [RedisSentinelCluster.Node]
    /// The contract's keys with prefix `{siwa}`: all in this slot.
    static let keyPrefix = "{siwa}"
    static let slot = RedisClusterLocator.hashSlot(of: Array("{siwa}:events".utf8))

    /// How clients, the cluster bus and replication reach the nodes.
    enum Transport: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case plain = "plain TCP"
        case tls = "TLS only (--tls-cluster yes)"

        var testDescription: String { rawValue }
    }

    /// The CA and the `localhost` certificate every node presents, or nil for plain TCP.
    let tls: TestCertificateAuthority?
    /// `redis-server` and `redis-cli`, or Valkey's.
    let flavor: RedisFlavor

    /// A cluster whose nodes use `transport`; for TLS, a CA and a `localhost` certificate
    /// (for servers and, as replicas and bus peers present it, clients) made in its directory;
    /// `serverNames`: the names the certificate holds.
    convenience init(
        transport: Transport, nodeTimeoutMilliseconds: Int = 1000, serverNames: String = "DNS:localhost"
    ) throws {
        let certificates = FileManager.default.temporaryDirectory
            .appendingPathComponent("siwa-cluster-ca-\(UUID().uuidString)", isDirectory: true)
        var authority: TestCertificateAuthority?
        if transport == .tls {
            try FileManager.default.createDirectory(at: certificates, withIntermediateDirectories: true)
            authority = try TestCertificateAuthority(
                in: certificates, serverUsage: "serverAuth,clientAuth", serverNames: serverNames)
        }
        try self.init(nodeTimeoutMilliseconds: nodeTimeoutMilliseconds, tls: authority)
    }

    init(nodeTimeoutMilliseconds: Int = 1000, tls: TestCertificateAuthority? = nil, flavor: RedisFlavor = .underTest)
        throws
    {
        self.tls = tls
        self.flavor = flavor
        signal(SIGPIPE, SIG_IGN)
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("siwa-cluster-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let directory = self.directory
        let drawn = try LoopbackPort.freeWithBusPorts(6)
        let ports = drawn.map(\.port)
        nodes = drawn.enumerated().map { index, node in
            let port = node.port
            let nodeDirectory = directory.appendingPathComponent("node-\(index)").path
            try? FileManager.default.createDirectory(atPath: nodeDirectory, withIntermediateDirectories: true)
            return RedisSentinelCluster.Node(
                port: port,
                arguments: [
                    "--port", tls == nil ? String(port) : "0", "--bind", "127.0.0.1", "--dir", nodeDirectory, "--save",
                    "",
                    "--appendonly", "no", "--daemonize", "no", "--logfile", nodeDirectory + "/redis.log",
                    "--cluster-enabled", "yes", "--cluster-config-file", nodeDirectory + "/nodes.conf",
                    "--cluster-node-timeout", String(nodeTimeoutMilliseconds), "--cluster-port", String(node.busPort),
                ] + (tls.map { Self.tlsArguments($0, port: port) } ?? []),
                logPath: nodeDirectory + "/redis.log", flavor: flavor)
        }
        do {
            for node in nodes { try node.start() }
            try waitUntil(timeout: 20) {
                self.nodes.allSatisfy { (try? self.connection(port: $0.port).command("PING")) != nil }
            }
            let create = try Self.runCLI(
                flavor,
                cliTLSArguments + ["--cluster", "create"] + ports.map { "127.0.0.1:\($0)" } + [
                    "--cluster-replicas", "1", "--cluster-yes",
                ])
            guard create.status == 0 else {
                throw StartError(description: "redis-cli --cluster create failed: \(create.output.suffix(800))")
            }
            try waitUntil(timeout: 60) { self.isFormed() }
        } catch {
            shutdown()
            throw error
        }
    }

    deinit { shutdown() }

    /// `SIWA_REDIS_CLUSTER_NODES` naming every node.
    var nodeList: String { nodes.map { "127.0.0.1:\($0.port)" }.joined(separator: ",") }

    static func tlsArguments(_ authority: TestCertificateAuthority, port: Int) -> [String] {
        [
            "--tls-port", String(port), "--tls-cluster", "yes", "--tls-replication", "yes", "--tls-cert-file",
            authority.serverCertificatePath, "--tls-key-file", authority.serverKeyPath, "--tls-ca-cert-file",
            authority.caCertificatePath, "--tls-auth-clients", "no",
        ]
    }

    /// redis-cli's options for this cluster's TLS.
    var cliTLSArguments: [String] {
        tls.map { ["--tls", "--cacert", $0.caCertificatePath, "--sni", "localhost"] } ?? []
    }

    /// What a client needs for this cluster's TLS: the CA, and `localhost`, the name the
    /// certificates hold (the cluster names nodes by IP address).
    var clientTLS: RedisTLS? { tls.map { RedisTLS(caFile: $0.caCertificatePath, serverName: "localhost") } }

    func connection(port: Int) -> RedisConnection {
        RedisConnection(
            endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: port), tls: clientTLS),
            connectTimeout: .milliseconds(500), commandTimeout: .seconds(2))
    }

    /// Every node says `cluster_state:ok`, and each primary has its replica in sync.
    private func isFormed() -> Bool {
        for node in nodes {
            let info = (try? connection(port: node.port).command("CLUSTER", "INFO"))?.string ?? ""
            guard info.contains("cluster_state:ok") else { return false }
        }
        return nodes.filter { role(of: $0.port) == "slave" }.count == 3
            && nodes.filter { role(of: $0.port) == "master" }.allSatisfy { node in
                ((try? connection(port: node.port).command("INFO", "replication"))?.string ?? "").contains(
                    "state=online")
            }
    }

    func role(of port: Int) -> String? {
        (try? connection(port: port).command("ROLE"))?.array?.first?.string
    }

    /// The port of the node that owns the contract's slot, as a running node's `CLUSTER SLOTS` says.
    func slotOwnerPort() -> Int? {
        for node in nodes where node.isRunning {
            guard let ranges = (try? connection(port: node.port).command("CLUSTER", "SLOTS"))?.array else { continue }
            for range in ranges {
                guard let parts = range.array, parts.count >= 3, let start = parts[0].integer,
                    let end = parts[1].integer, (start...end).contains(Int64(Self.slot)),
                    let port = parts[2].array?[1].integer
                else { continue }
                return Int(port)
            }
        }
        return nil
    }

    /// A connection to the slot's owner, found the way a test reads the result.
    func ownerConnection() throws -> RedisConnection {
        guard let port = slotOwnerPort() else { throw StartError(description: "no node owns the slot") }
        return connection(port: port)
    }

    func nodeID(port: Int) throws -> String {
        guard let id = try connection(port: port).command("CLUSTER", "MYID").string else {
            throw StartError(description: "CLUSTER MYID gave nothing on \(port)")
        }
        return id
    }

    /// Moves the contract's slot by hand, as `redis-cli --cluster reshard` does: IMPORTING on
    /// the target, MIGRATING on the source, the keys moved a few at a time (`batchPause`
    /// seconds apart, so writes meet the half-moved slot), then `beforeHandOver` (every key
    /// on the target, the slot still migrating: a write now gets `ASK`), then the slot given
    /// to the target on every primary. Bounded: at most 10,000 batches.
    func migrateSlot(
        from source: Int, to target: Int, batchPause: TimeInterval, beforeHandOver: () -> Void = {}
    ) throws {
        let slot = String(Self.slot)
        let sourceID = try nodeID(port: source)
        let targetID = try nodeID(port: target)
        _ = try connection(port: target).command("CLUSTER", "SETSLOT", slot, "IMPORTING", sourceID)
        _ = try connection(port: source).command("CLUSTER", "SETSLOT", slot, "MIGRATING", targetID)
        let sourceConnection = connection(port: source)
        for _ in 0..<10_000 {
            let keys = (try sourceConnection.command("CLUSTER", "GETKEYSINSLOT", slot, "20").array ?? [])
                .compactMap(\.string)
            if keys.isEmpty { break }
            _ = try sourceConnection.command(
                ["MIGRATE", "127.0.0.1", String(target), "", "0", "5000", "KEYS"] + keys)
            Thread.sleep(forTimeInterval: batchPause)
        }
        beforeHandOver()
        // The target first, then the source, then the others (as redis-cli does).
        _ = try connection(port: target).command("CLUSTER", "SETSLOT", slot, "NODE", targetID)
        _ = try connection(port: source).command("CLUSTER", "SETSLOT", slot, "NODE", targetID)
        for node in nodes
        where node.isRunning && node.port != source && node.port != target
            && role(of: node.port) == "master"
        {
            _ = try connection(port: node.port).command("CLUSTER", "SETSLOT", slot, "NODE", targetID)
        }
    }

    func node(port: Int) -> RedisSentinelCluster.Node? { nodes.first { $0.port == port } }

    /// Nodes started beside the cluster (`staleSeed()`), stopped by `shutdown()`.
    private var extras: [RedisSentinelCluster.Node] = []

    /// A node with a stale view, as a partitioned node or a replaced one left running has:
    /// a cluster-enabled node that met one other node, which took every slot and was then
    /// SIGKILLed. It still answers `CLUSTER SLOTS`, naming the dead node as every slot's owner
    /// (two nodes, one of them holding slots: nobody can mark the dead one failed). Plain
    /// TCP only. Returns the stale node's port and the dead owner's.
    func staleSeed() throws -> (port: Int, deadOwner: Int) {
        let drawn = try LoopbackPort.freeWithBusPorts(2)
        let made = drawn.enumerated().map { index, ports in
            let port = ports.port
            let nodeDirectory = directory.appendingPathComponent("stale-\(index)").path
            try? FileManager.default.createDirectory(atPath: nodeDirectory, withIntermediateDirectories: true)
            return RedisSentinelCluster.Node(
                port: port,
                arguments: [
                    "--port", String(port), "--bind", "127.0.0.1", "--dir", nodeDirectory, "--save", "",
                    "--appendonly", "no", "--daemonize", "no", "--logfile", nodeDirectory + "/redis.log",
                    "--cluster-enabled", "yes", "--cluster-config-file", nodeDirectory + "/nodes.conf",
                    "--cluster-port", String(ports.busPort),
                ], logPath: nodeDirectory + "/redis.log", flavor: flavor)
        }
        extras += made
        for node in made { try node.start() }
        let (stale, owner) = (made[0], made[1])
        try waitUntil(timeout: 20) { made.allSatisfy { (try? self.connection(port: $0.port).command("PING")) != nil } }
        _ = try connection(port: owner.port).command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        _ = try connection(port: stale.port).command(
            "CLUSTER", "MEET", "127.0.0.1", String(owner.port), String(drawn[1].busPort))
        try waitUntil(timeout: 30) {
            let ranges = (try? self.connection(port: stale.port).command("CLUSTER", "SLOTS"))?.array ?? []
            return ranges.contains { $0.array?.dropFirst(2).first?.array?[1].integer == Int64(owner.port) }
        }
        owner.kill()
        return (stale.port, owner.port)
    }

    /// Waits (polling every 100 ms) until `condition` holds, or throws after `timeout` seconds.
    func waitUntil(timeout: TimeInterval, _ condition: () -> Bool) throws {
        guard SIWATestSupport.waitUntil(timeout: timeout, interval: .milliseconds(100), condition) else {
            throw StartError(
                description: "the cluster did not get there within \(timeout) s (logs in \(directory.path))")
        }
    }

    /// Runs `redis-cli` (or `valkey-cli`) with `arguments`, killed after 120 s: its status and
    /// its standard output and error together.
    static func runCLI(_ flavor: RedisFlavor, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let run = try CommandRun.run(URL(fileURLWithPath: flavor.cliPath), arguments, timeout: .seconds(120))
        return (run.status, run.output + run.errors)
    }

    func shutdown() {
        for node in nodes + extras { node.kill() }
        try? FileManager.default.removeItem(at: directory)
        if let tls { try? FileManager.default.removeItem(at: tls.directory) }
    }
}
