import Foundation
import SIWARedis

/// Redis as teams run it for availability, on loopback: one primary, two replicas and
/// three sentinels (real `redis-server`, the sentinels as `redis-server --sentinel`; or
/// the same with `valkey-server`), each on its own free port and in one temporary
/// directory. With `tls`, every node and sentinel listens with TLS only and replication
/// runs over TLS. No persistence: a node that is killed loses what it held, as a lost
/// machine does. Always call `shutdown()`.
final class RedisSentinelCluster: @unchecked Sendable {
    static let masterName = "siwa-test-master"

    struct StartError: Error, CustomStringConvertible { let description: String }

    /// One redis-server process (data node or sentinel; a cluster node too).
    final class Node: @unchecked Sendable {
        let port: Int
        let arguments: [String]
        let logPath: String
        let flavor: RedisFlavor
        private(set) var process: Process?

        init(port: Int, arguments: [String], logPath: String, flavor: RedisFlavor) {
            self.port = port
            self.arguments = arguments
            self.logPath = logPath
            self.flavor = flavor
        }

        /// Started by the tests' one Redis launcher; the group waits until it has formed.
        func start() throws {
            process = try RedisServerProcess.launch(flavor, arguments)
        }

        /// A lost machine: SIGKILL, nothing flushed, no connection closed politely.
        func kill() {
            guard let process, process.isRunning else { return }
            Foundation.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }

        var isRunning: Bool { process?.isRunning ?? false }

        /// A VM pause, a long fork, a stalled disk: SIGSTOP. The kernel still accepts
        /// connections and buffers what clients send; the node runs it at `resume()`.
        func pause() {
            guard let process, process.isRunning else { return }
            Foundation.kill(process.processIdentifier, SIGSTOP)
        }

        func resume() {
            guard let process else { return }
            Foundation.kill(process.processIdentifier, SIGCONT)
        }
    }

    let directory: URL
    let dataNodes: [Node]
    let sentinels: [Node]
    let sentinelPassword: String?
    let flavor: RedisFlavor
    /// Every node's certificate and the CA (TLS-only nodes and sentinels), or nil for plain TCP.
    let tls: RedisServerProcess.TLSFiles?
    /// Sentinels started by `startStaleSentinel`, stopped by `shutdown()` too.
    private(set) var staleSentinels: [Node] = []

    /// `downAfterMilliseconds`: how long the primary may be silent before the sentinels call it down.
    init(
        downAfterMilliseconds: Int = 1000, sentinelPassword: String? = nil, flavor: RedisFlavor = .underTest,
        tls: RedisServerProcess.TLSFiles? = nil, failoverTimeoutMilliseconds: Int = 10000
    ) throws {
        signal(SIGPIPE, SIG_IGN)
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("siwa-sentinel-\(UUID().uuidString)", isDirectory: true)
        let directory = self.directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.sentinelPassword = sentinelPassword
        self.flavor = flavor
        self.tls = tls
        let tlsArguments =
            tls.map {
                [
                    "--tls-cert-file", $0.certificatePath, "--tls-key-file", $0.keyPath, "--tls-ca-cert-file",
                    $0.caPath,
                    "--tls-auth-clients", $0.requireClientCertificates ? "yes" : "no", "--tls-replication", "yes",
                ]
            } ?? []
        let dataPorts = try (0..<3).map { _ in try LoopbackPort.free() }
        let primaryPort = dataPorts[0]
        dataNodes = dataPorts.enumerated().map { index, port in
            let nodeDirectory = Self.makeDirectory(in: directory, "data-\(index)")
            var arguments = [
                "--port", tls == nil ? String(port) : "0", "--bind", "127.0.0.1", "--dir", nodeDirectory, "--save",
                "", "--appendonly", "no", "--daemonize", "no", "--logfile", nodeDirectory + "/redis.log",
            ]
            if tls != nil { arguments += ["--tls-port", String(port)] + tlsArguments }
            if index > 0 { arguments += ["--replicaof", "127.0.0.1", String(primaryPort)] }
            return Node(
                port: port, arguments: arguments, logPath: nodeDirectory + "/redis.log", flavor: flavor)
        }
        sentinels = try (0..<3).map { index in
            let port = try LoopbackPort.free()
            let nodeDirectory = Self.makeDirectory(in: directory, "sentinel-\(index)")
            var config = """
                port \(tls == nil ? port : 0)
                bind 127.0.0.1
                dir \(nodeDirectory)
                logfile \(nodeDirectory)/sentinel.log
                sentinel monitor \(Self.masterName) 127.0.0.1 \(primaryPort) 2
                sentinel down-after-milliseconds \(Self.masterName) \(downAfterMilliseconds)
                sentinel failover-timeout \(Self.masterName) \(failoverTimeoutMilliseconds)
                sentinel parallel-syncs \(Self.masterName) 2

                """
            if let sentinelPassword { config += "requirepass \(sentinelPassword)\n" }
            if tls != nil {
                // The same options as the command line's, as sentinel.conf lines.
                config += "tls-port \(port)\n"
                for pair in stride(from: 0, to: tlsArguments.count, by: 2) {
                    config += "\(tlsArguments[pair].dropFirst(2)) \(tlsArguments[pair + 1])\n"
                }
            }
            // Sentinels rewrite their file with what they learn: one writable file each.
            let configPath = nodeDirectory + "/sentinel.conf"
            try config.write(toFile: configPath, atomically: true, encoding: .utf8)
            return Node(
                port: port, arguments: [configPath, "--sentinel"], logPath: nodeDirectory + "/sentinel.log",
                flavor: flavor)
        }
        do {
            for node in dataNodes { try node.start() }
            for node in sentinels { try node.start() }
            // Usually a few seconds (the sentinels' hellos every 2 s, their INFO of the
            // replicas every 10 s); 30 s once ran out with three test processes on two cores.
            try waitUntilFormed(timeout: 60)
        } catch {
            shutdown()
            throw error
        }
    }

    deinit { shutdown() }

    private static func makeDirectory(in parent: URL, _ name: String) -> String {
        let url = parent.appendingPathComponent(name, isDirectory: true)
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url.path
    }

    /// `SIWA_REDIS_SENTINELS` for this cluster.
    var sentinelList: String { sentinels.map { "127.0.0.1:\($0.port)" }.joined(separator: ",") }

    /// A connection to one node (over TLS, trusting the test CA, when the cluster has TLS).
    func connection(port: Int, password: String? = nil) -> RedisConnection {
        RedisConnection(
            endpoint: RedisEndpoint(
                address: .tcp(host: "127.0.0.1", port: port), password: password, tls: clientTLS),
            connectTimeout: .milliseconds(500), commandTimeout: .seconds(2))
    }

    /// What a client needs for this cluster's TLS: the CA, and `localhost`, the name the
    /// certificates hold (the sentinels name nodes by IP address).
    var clientTLS: RedisTLS? { tls.map { RedisTLS(caFile: $0.caPath, serverName: "localhost") } }

    /// The port the first answering sentinel names as the master's, or nil.
    func masterPortFromSentinels() -> Int? {
        for sentinel in sentinels where sentinel.isRunning {
            let reply = try? connection(port: sentinel.port, password: sentinelPassword)
                .command("SENTINEL", "get-master-addr-by-name", Self.masterName)
            if let pair = reply?.array, pair.count == 2, let port = pair[1].string.flatMap({ Int($0) }) { return port }
        }
        return nil
    }

    /// The port the sentinels name as the master's, when that running node's ROLE agrees.
    func currentPrimaryFromSentinels() -> Int? {
        guard let port = masterPortFromSentinels(),
            let node = dataNodes.first(where: { $0.port == port }), node.isRunning,
            (try? connection(port: port).command("ROLE"))?.array?.first?.string == "master"
        else { return nil }
        return port
    }

    /// The port every running sentinel names under one `config-epoch` with no failover under way
    /// and no node down (`SENTINEL MASTER`), when that node's ROLE is master; else nil.
    func settledPrimary() -> Int? {
        var named: Set<String> = []
        for sentinel in sentinels where sentinel.isRunning {
            guard
                let fields =
                    (try? connection(port: sentinel.port, password: sentinelPassword)
                    .command("SENTINEL", "MASTER", Self.masterName))?.fieldMap,
                let port = fields["port"], let epoch = fields["config-epoch"], let flags = fields["flags"],
                flags == "master"
            else { return nil }
            named.insert("\(port)@\(epoch)")
        }
        guard named.count == 1, let port = named.first.flatMap({ Int($0.prefix { $0 != "@" }) }),
            (try? connection(port: port).command("ROLE"))?.array?.first?.string == "master"
        else { return nil }
        return port
    }

    /// The data node whose ROLE is master, among those running.
    func currentPrimary() -> Node? {
        dataNodes.first { node in
            node.isRunning && (try? connection(port: node.port).command("ROLE"))?.array?.first?.string == "master"
        }
    }

    /// The node started as the primary.
    var initialPrimary: Node { dataNodes[0] }

    /// Every sentinel knows the two replicas and the two other sentinels; both replicas are in sync.
    private func waitUntilFormed(timeout: TimeInterval) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if formed() { return }
            usleep(100_000)
        }
        throw StartError(
            description: "the sentinel cluster did not form within \(timeout) s: \(formationState())")
    }

    /// What `formed()` found, node by node, with each node's last log lines: the group's
    /// directory is removed at shutdown, so the error carries what it would have shown.
    private func formationState() -> String {
        var lines: [String] = []
        for (name, node) in dataNodes.enumerated().map({ ("data-\($0)", $1) })
            + sentinels.enumerated().map({ ("sentinel-\($0)", $1) })
        {
            var line = "\(name) port \(node.port) \(node.isRunning ? "running" : "exited")"
            if node.arguments.contains("--sentinel") {
                let fields =
                    (try? connection(port: node.port, password: sentinelPassword)
                    .command("SENTINEL", "master", Self.masterName))?.fieldMap
                let replicas = fields?["num-slaves"] ?? "?"
                let others = fields?["num-other-sentinels"] ?? "?"
                line += ": num-slaves \(replicas), num-other-sentinels \(others)"
            }
            let log = (try? String(contentsOfFile: node.logPath, encoding: .utf8)) ?? ""
            let tail = log.split(separator: "\n").suffix(4).joined(separator: " | ")
            lines.append(line + "; log: " + tail)
        }
        let info = (try? connection(port: initialPrimary.port).command("INFO", "replication"))?.string ?? ""
        lines.append("replicas online on the primary: \(info.components(separatedBy: "state=online").count - 1)")
        return lines.joined(separator: "\n")
    }

    private func formed() -> Bool {
        for sentinel in sentinels {
            guard
                let fields =
                    (try? connection(port: sentinel.port, password: sentinelPassword)
                    .command("SENTINEL", "master", Self.masterName))?.fieldMap,
                fields["num-slaves"] == "2", fields["num-other-sentinels"] == "2"
            else { return false }
        }
        let info = (try? connection(port: initialPrimary.port).command("INFO", "replication"))?.string ?? ""
        return info.components(separatedBy: "state=online").count - 1 == 2
    }

    /// Waits until the sentinels name a master other than `oldPort` and that node's ROLE is master.
    /// The tests give it 60 s: an attempt that fails (a split vote, a promotion not seen in
    /// time on a loaded machine) is started again only after twice the failover-timeout (10 s).
    func waitForFailover(from oldPort: Int, timeout: TimeInterval) -> Node? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let port = masterPortFromSentinels(), port != oldPort,
                let node = dataNodes.first(where: { $0.port == port }),
                (try? connection(port: port).command("ROLE"))?.array?.first?.string == "master"
            {
                return node
            }
            usleep(100_000)
        }
        return nil
    }

    /// A real sentinel that names a replica as the master: one configured with `port`, a
    /// replica's address (an old primary's, as a sentinel restored from an old configuration
    /// or cut off from a failover has). No failover has raised the configuration epoch, so the
    /// other sentinels' hello messages never correct it. Returns once it names that port.
    func startStaleSentinel(naming port: Int) throws -> Node {
        let sentinelPort = try LoopbackPort.free()
        let nodeDirectory = Self.makeDirectory(in: directory, "stale-sentinel-\(staleSentinels.count)")
        var config = """
            port \(sentinelPort)
            bind 127.0.0.1
            dir \(nodeDirectory)
            logfile \(nodeDirectory)/sentinel.log
            sentinel monitor \(Self.masterName) 127.0.0.1 \(port) 2
            sentinel down-after-milliseconds \(Self.masterName) 60000

            """
        if let sentinelPassword { config += "requirepass \(sentinelPassword)\n" }
        let configPath = nodeDirectory + "/sentinel.conf"
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        let node = Node(
            port: sentinelPort, arguments: [configPath, "--sentinel"], logPath: nodeDirectory + "/sentinel.log",
            flavor: flavor)
        try node.start()
        staleSentinels.append(node)
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let reply = try? connection(port: sentinelPort, password: sentinelPassword)
                .command("SENTINEL", "get-master-addr-by-name", Self.masterName)
            if reply?.array?.last?.string == String(port) { return node }
            usleep(50_000)
        }
        throw StartError(description: "the stale sentinel did not answer within 20 s (logs in \(directory.path))")
    }

    func shutdown() {
        for node in dataNodes { node.resume() }
        for node in staleSentinels + sentinels + dataNodes { node.kill() }
        try? FileManager.default.removeItem(at: directory)
    }
}
