import Synchronization

/// Finds, in a Redis Cluster, the primary that owns the one hash slot every key of the
/// contract is in (the key prefix is a hash tag, such as `{siwa}`):
///
/// 1. ask the seed nodes in order (then the nodes a previous answer named) for
///    `CLUSTER SLOTS`; a node that cannot be reached is skipped;
/// 2. confirm the owner a node names before using it: connect to it and ask `ROLE`
///    (`master`). A node whose named owner cannot be reached or is not a master has a
///    stale view (partitioned, or a replaced node left running): it is reported
///    (`Event.nodeNamedUnusableOwner`), moved to the back of the seed list, and the
///    discovery goes on to the next node. The node whose owner is confirmed is moved to
///    the front;
/// 3. the connection that uses the address confirms it with `ROLE` again (see
///    `RedisConnection`) before sending anything else (the owner may have changed since);
/// 4. a `MOVED` answer names the new owner (`moved(to:)`); a connection failure, a
///    timeout, `READONLY` or `CLUSTERDOWN` makes the connection `forget` the address, so the
///    next connection asks the cluster again.
///
/// A node with no announced endpoint (`cluster-preferred-endpoint-type unknown-endpoint`)
/// is named with a NULL or empty host: that means the host of the node that was asked
/// (of the connection, in `MOVED`/`ASK`). A host of `?` (a hostname endpoint type with no
/// hostname announced) names no usable node.
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
    private let observer: @Sendable (Event) -> Void

    /// What a discovery saw, for the application to log: which node named what.
    public enum Event: Sendable, Equatable {
        /// `node` named `owner` as the slot's primary, and `owner` could not be reached or
        /// is not a master (`reason` says which): `node`'s view is stale; it was moved to
        /// the back of the seed list and the discovery went on to the next node.
        case nodeNamedUnusableOwner(node: Node, owner: Node, reason: String)
        /// `node` named `primary`, confirmed by ROLE; `previous` was the last owner found.
        case primaryFound(node: Node, primary: Node, previous: Node?)
    }

    /// `hashTagKey` is any key of the contract (its slot is every key's slot); `timeout`
    /// bounds each node's connect and answer; `observer` hears every `Event` (on the
    /// discovering thread).
    public init(
        seeds: [Node], hashTagKey: String, endpoint: RedisEndpoint, timeout: Duration,
        observer: @escaping @Sendable (Event) -> Void = { _ in }
    ) {
        slot = Self.hashSlot(of: Array(hashTagKey.utf8))
        self.endpoint = endpoint
        self.timeout = timeout
        self.observer = observer
        state = Mutex(State(seeds: seeds))
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

    /// Asks the nodes now (seeds first) for `CLUSTER SLOTS`, confirms the owner the first
    /// answer names (ROLE master) and remembers it; a node whose owner is not confirmed
    /// goes to the back of the seeds and the next node is asked.
    @discardableResult
    public func discover() throws(RedisError) -> Node {
        let order = state.withLock { state in
            state.discoveries += 1
            return state.seeds + state.named.filter { !state.seeds.contains($0) }
        }
        var round = Round(slot: slot)
        var verdicts: [Node: RedisError?] = [:]
        for node in order {
            let reply: RedisReply
            do {
                reply = try connection(to: node).command("CLUSTER", "SLOTS")
            } catch {
                round.recordFailure(error, from: node)
                continue
            }
            let ranges = Self.slotRanges(reply, askedHost: node.host)
            guard let owner = ranges.first(where: { $0.slots.contains(slot) })?.primary else {
                round.recordUncovered(node)
                continue
            }
            // One probe per owner in a discovery: nodes that share a stale view (all of them
            // for a moment during a failover) cost one connect timeout, not one each.
            let verdict = verdicts[owner] ?? unusable(owner)
            verdicts[owner] = verdict
            if let reason = verdict {
                round.recordStale(node, named: owner, reason)
                state.withLock { state in
                    if let index = state.seeds.firstIndex(of: node) {
                        state.seeds.remove(at: index)
                        state.seeds.append(node)
                    }
                }
                observer(.nodeNamedUnusableOwner(node: node, owner: owner, reason: reason.message))
                continue
            }
            let previous = state.withLock { state in
                if let index = state.seeds.firstIndex(of: node), index != 0 {
                    state.seeds.remove(at: index)
                    state.seeds.insert(node, at: 0)
                }
                state.named = ranges.flatMap(\.nodes)
                let previous = state.lastFound
                if let previous, previous != owner { state.failovers += 1 }
                state.lastFound = owner
                state.primary = owner
                return previous
            }
            observer(.primaryFound(node: node, primary: owner, previous: previous))
            return owner
        }
        throw round.error
    }

    /// A connection to `node` with the cluster's login and TLS (no cluster routing).
    private func connection(to node: Node) -> RedisConnection {
        RedisConnection(endpoint: endpoint.at(node, database: 0), connectTimeout: timeout, commandTimeout: timeout)
    }

    /// Why the owner a node named cannot be used (it does not answer, or its ROLE is not
    /// master), or nil when it is confirmed.
    private func unusable(_ owner: Node) -> RedisError? {
        let probe = connection(to: owner)
        defer { probe.disconnect() }
        do {
            let role = try probe.command("ROLE").array?.first?.string ?? "?"
            return role == "master" ? nil : RedisError(.connectionFailed, "ROLE is \(role), not master")
        } catch {
            return error
        }
    }
}
