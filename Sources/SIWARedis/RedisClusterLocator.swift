import Synchronization

/// Finds, in a Redis Cluster, the primary that owns the one hash slot every key of the
/// contract is in (the key prefix is a hash tag, such as `{siwa}`):
///
/// 1. ask the seed nodes in order (then the nodes a previous answer named) for
///    `CLUSTER SLOTS`; a node that cannot be reached is skipped, and the first that
///    answers is moved to the front of the seed list;
/// 2. the connection that uses the address confirms it with `ROLE` (see
///    `RedisConnection`) before sending anything else;
/// 3. a `MOVED` answer names the new owner (`moved(to:)`); a connection failure, a
///    timeout, `READONLY` or `CLUSTERDOWN` makes the connection `forget` the address, so the
///    next connection asks the cluster again.
///
/// Shared by every worker connection and the spool replayer (thread safe). Discoveries
/// run one at a time.
public final class RedisClusterLocator: Sendable {
    /// One cluster node's address.
    public typealias Node = RedisNodeAddress

    /// The hash slot of every key of the contract.
    public let slot: Int
    /// Database 0 (a cluster has no other), the user and password, and TLS, for every node.
    private let endpoint: RedisEndpoint
    private let timeout: Duration

    private struct State {
        var seeds: [Node]
        /// Every node named by the last `CLUSTER SLOTS` answer, asked after the seeds.
        var named: [Node] = []
        var primary: Node?
        var lastFound: Node?
        var discoveries = 0
        var failovers = 0
        var moves = 0
        var asks = 0
    }

    private let state: Mutex<State>
    private let discovery = Mutex(())

    /// `hashTagKey` is any key of the contract (its slot is every key's slot); `timeout`
    /// bounds each node's connect and answer.
    public init(seeds: [Node], hashTagKey: String, endpoint: RedisEndpoint, timeout: Duration) {
        slot = Self.hashSlot(of: Array(hashTagKey.utf8))
        self.endpoint = endpoint
        self.timeout = timeout
        state = Mutex(State(seeds: seeds))
    }

    /// Parses `host:port,host:port,...` (IPv6 hosts in brackets); the error says what is wrong.
    public static func parseNodes(_ text: String) -> Result<[Node], RedisError> {
        switch RedisPrimaryLocator.parseSentinels(text) {
        case .success(let found): .success(found)
        case .failure(let error):
            .failure(RedisError(.invalidEndpoint, error.message, field: .clusterNodes))
        }
    }

    /// Redis Cluster's slot of a key: CRC16 (XMODEM) of the hash tag (the text between
    /// the first `{` and the next `}`, when not empty), else of the whole key, modulo 16384.
    public static func hashSlot(of key: [UInt8]) -> Int {
        var hashed = key[...]
        if let open = key.firstIndex(of: UInt8(ascii: "{")),
            let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1
        {
            hashed = key[(open + 1)..<close]
        }
        var crc: UInt16 = 0
        for byte in hashed {
            crc ^= UInt16(byte) << 8
            for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        }
        return Int(crc) & 16383
    }

    /// The seed nodes, in the order they will be asked next.
    public var seeds: [Node] { state.withLock { $0.seeds } }

    /// The slot's primary in use, or nil when none is known.
    public var current: Node? { state.withLock { $0.primary } }

    /// How many times the cluster was asked for its slots.
    public var discoveries: Int { state.withLock { $0.discoveries } }

    /// How many times the slot's primary changed (a failover or a migration seen).
    public var failovers: Int { state.withLock { $0.failovers } }

    /// How many `MOVED` answers were followed.
    public var moves: Int { state.withLock { $0.moves } }

    /// How many `ASK` answers were followed (the target answered).
    public var asks: Int { state.withLock { $0.asks } }

    /// The primary to connect to: the known one, else a discovery.
    public func primary() throws(RedisError) -> Node {
        if let known = current { return known }
        return try discovery.withLock { _ throws(RedisError) -> Node in
            if let known = current { return known }
            return try discover()
        }
    }

    /// A connection found `node` unusable: the next connection asks the cluster again.
    public func forget(_ node: Node) {
        state.withLock { state in
            if state.primary == node { state.primary = nil }
        }
    }

    /// A node answered `MOVED <slot> <node>` for the slot: that node owns it now.
    public func moved(to node: Node) {
        state.withLock { state in
            state.moves += 1
            if let previous = state.lastFound, previous != node { state.failovers += 1 }
            state.lastFound = node
            state.primary = node
        }
    }

    /// An `ASK` answer was followed: the migration's target answered the command (the slot
    /// is being migrated; the owner stays the same).
    public func asked() {
        state.withLock { $0.asks += 1 }
    }

    /// Asks the nodes now (seeds first) for `CLUSTER SLOTS`, and remembers the slot's primary.
    @discardableResult
    public func discover() throws(RedisError) -> Node {
        let order = state.withLock { state in
            state.discoveries += 1
            return state.seeds + state.named.filter { !state.seeds.contains($0) }
        }
        var unreachable: [String] = []
        var notCluster: [String] = []
        var uncovered: [String] = []
        var refusedLogin: [String] = []
        for node in order {
            let connection = RedisConnection(
                endpoint: RedisEndpoint(
                    address: .tcp(host: node.host, port: node.port), username: endpoint.username,
                    password: endpoint.password, tls: endpoint.tls),
                connectTimeout: timeout, commandTimeout: timeout)
            let reply: RedisReply
            do {
                reply = try connection.command("CLUSTER", "SLOTS")
            } catch {
                if error.code == .serverError && error.message.contains("cluster support disabled") {
                    notCluster.append(node.description)
                } else if error.code == .connectionFailed && error.message.contains("AUTH") {
                    refusedLogin.append("\(node): \(error.message)")
                } else {
                    unreachable.append("\(node): \(error.message)")
                }
                continue
            }
            let ranges = Self.ranges(reply, askedHost: node.host)
            guard let owner = ranges.first(where: { $0.slots.contains(slot) })?.primary else {
                uncovered.append(node.description)
                continue
            }
            state.withLock { state in
                if let index = state.seeds.firstIndex(of: node), index != 0 {
                    state.seeds.remove(at: index)
                    state.seeds.insert(node, at: 0)
                }
                state.named = ranges.flatMap(\.nodes)
                if let previous = state.lastFound, previous != owner { state.failovers += 1 }
                state.lastFound = owner
                state.primary = owner
            }
            return owner
        }
        if !notCluster.isEmpty {
            throw RedisError(
                .clusterRefused,
                "\(notCluster.joined(separator: ", ")) is not in cluster mode "
                    + "(cluster-enabled no)", field: .clusterNodes)
        }
        if !refusedLogin.isEmpty && unreachable.isEmpty {
            throw RedisError(
                .clusterRefused,
                "the cluster refused the login (\(refusedLogin.joined(separator: "; ")))", field: .url)
        }
        if !uncovered.isEmpty {
            throw RedisError(
                .connectionFailed,
                "no node owns hash slot \(slot) (asked \(uncovered.joined(separator: ", "))); the cluster is down")
        }
        throw RedisError(
            .connectionFailed,
            "no node answered CLUSTER SLOTS (\(unreachable.joined(separator: "; ")))",
            field: .clusterNodes)
    }

    private struct SlotRange {
        let slots: ClosedRange<Int>
        let primary: Node
        let nodes: [Node]
    }

    /// `CLUSTER SLOTS`: `[[start, end, [host, port, id, ...], [replica...]...], ...]`. An
    /// empty host means the node asked (Redis 7 without a known address).
    private static func ranges(_ reply: RedisReply, askedHost: String) -> [SlotRange] {
        guard let entries = reply.array else { return [] }
        var ranges: [SlotRange] = []
        for entry in entries {
            guard let parts = entry.array, parts.count >= 3, let start = parts[0].integer, let end = parts[1].integer,
                start <= end
            else { continue }
            let nodes: [Node] = parts.dropFirst(2).compactMap { part in
                guard let fields = part.array, fields.count >= 2, let host = fields[0].string,
                    let port = fields[1].integer, (1...65_535).contains(port), host != "?"
                else { return nil }
                return Node(host: host.isEmpty ? askedHost : host, port: Int(port))
            }
            guard let primary = nodes.first else { continue }
            ranges.append(SlotRange(slots: Int(start)...Int(end), primary: primary, nodes: nodes))
        }
        return ranges
    }

    /// `MOVED <slot> <host:port>` or `ASK <slot> <host:port>`, parsed.
    public enum Redirect: Equatable {
        case moved(Node)
        case ask(Node)

        public init?(reply text: String) {
            let words = text.split(separator: " ")
            guard words.count == 3, words[0] == "MOVED" || words[0] == "ASK",
                let colon = words[2].lastIndex(of: ":"), let port = Int(words[2][words[2].index(after: colon)...]),
                (1...65_535).contains(port)
            else { return nil }
            var host = String(words[2][..<colon])
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            guard !host.isEmpty else { return nil }
            let node = Node(host: host, port: port)
            self = words[0] == "MOVED" ? .moved(node) : .ask(node)
        }
    }
}
