/// Redis Cluster: the connection goes to the primary of the contract's one hash slot, and
/// follows `MOVED` (the slot's new owner, remembered for every connection) and `ASK` (a
/// slot being migrated: `ASKING`, then the command, once, on the target).
final class ClusterRouting: RedisRouting {
    /// A command follows at most this many `MOVED` answers (a failover seen late, then a
    /// migration) before it gives up as if Redis were unreachable.
    static let maximumRedirects = 3

    /// Replies that say this node is not, or no longer, where the slot can be written.
    static let clusterTrouble: Set<RedisError.ReplyKind> = [.readOnly, .clusterDown, .masterDown]

    let cluster: RedisClusterLocator
    /// The cluster node this connection is on.
    var connectedNode: RedisNodeAddress?
    /// When the last command was answered through `ASK`: the connection to the migration's
    /// target that ran it, where what concerns its write (`WAIT`) is asked.
    var askedConnection: RedisConnection?
    /// While the slot moves: the connection to the migration's target, kept for the next
    /// `ASK` to the same node (not one per redirected command); dropped at `MOVED`, when this
    /// connection moves to another node, or when it fails.
    var migrationTarget: (node: RedisNodeAddress, connection: RedisConnection)?

    init(_ cluster: RedisClusterLocator) {
        self.cluster = cluster
    }

    var node: RedisNodeAddress? { connectedNode }

    var target: String? { "the cluster node \(connectedNode.map(\.description) ?? "(unknown)")" }

    func nodeTrouble(reply text: String, shown: String) -> RedisError? {
        guard let kind = RedisError.ReplyKind(reply: text), Self.clusterTrouble.contains(kind) else { return nil }
        // The node lost the slot's primary role or the cluster is failing over: ask it again.
        let on = target ?? ""
        connectionFailed()
        return RedisError(.connectionLost, "\(shown) (on \(on); asking the cluster again)")
    }

    /// The node failed or no longer owns the slot: the next connection asks the cluster.
    func connectionFailed() {
        if let connectedNode { cluster.forget(connectedNode) }
    }

    /// Connects to the slot's primary (confirmed by ROLE), or stays on it. Twice at most: an
    /// address that fails or is not master is forgotten, so the second try asks the cluster.
    func connect(_ connection: RedisConnection) throws(RedisError) {
        if connection.ready {
            // Another connection learnt of a new owner: follow it.
            guard let current = cluster.current, current != connectedNode else { return }
        }
        var lastError = RedisError(.connectionFailed, "no Redis Cluster node owns the slot")
        for _ in 0..<2 {
            let node = try cluster.primary()
            connection.disconnect()
            migrationTarget = nil
            connectedNode = node
            do throws(RedisError) {
                try connection.open(.tcp(host: node.host, port: node.port))
                let role = try connection.confirmPrimary()
                guard role == .master else {
                    throw RedisError(
                        .connectionFailed, "\(node) is not the master (ROLE: \(role)); asking the cluster again")
                }
                connection.ready = true
                return
            } catch {
                cluster.forget(node)
                connection.disconnect()
                lastError = error
            }
        }
        throw lastError
    }

    /// One command on the slot's primary, following redirections.
    func command(_ arguments: [[UInt8]], on connection: RedisConnection) throws(RedisError) -> RedisReply {
        askedConnection = nil
        for _ in 0..<Self.maximumRedirects {
            do {
                return try connection.sendHere(arguments)
            } catch  where error.reply == .moved || error.reply == .ask {
                guard
                    let redirect = RedisClusterLocator.Redirect(
                        reply: error.message, connectionHost: connectedNode?.host ?? "")
                else { throw error }
                switch redirect {
                case .unknownNode:
                    // The slot is elsewhere, at an address the node cannot give: ask the cluster.
                    connectionFailed()
                    connection.disconnect()
                    migrationTarget = nil
                case .moved(let node):
                    // Not run: the slot's owner changed. Every connection follows it.
                    cluster.moved(to: node)
                    connection.disconnect()
                    migrationTarget = nil
                case .ask(let node):
                    return try ask(node, arguments, connection)
                }
            }
        }
        throw RedisError(
            .connectionLost,
            "Redis Cluster moved slot \(cluster.slot) \(Self.maximumRedirects) times during one command; "
                + "asking the cluster again")
    }

    /// The slot is being migrated to `node` and the keys are there: `ASKING` then the
    /// command, on the connection to that target kept while the slot moves (a new one for a
    /// new target, or when the kept one fails before `ASKING` is answered), kept until the
    /// next command for what concerns its write (`commandAboutLastWrite`). Counted as followed
    /// once the target answered the command, an error reply included (`TRYAGAIN` while the
    /// keys move); not when the target could not be reached.
    private func ask(
        _ node: RedisNodeAddress, _ arguments: [[UInt8]], _ connection: RedisConnection
    ) throws(RedisError) -> RedisReply {
        var target: RedisConnection
        if let kept = migrationTarget, kept.node == node {
            target = kept.connection
            do throws(RedisError) {
                _ = try target.command("ASKING")
            } catch  where error.isConnectionError {
                // Closed while idle (a server timeout, a restart): a new connection, once.
                target = try askingConnection(to: node, from: connection)
            }
        } else {
            target = try askingConnection(to: node, from: connection)
        }
        let reply: RedisReply
        do throws(RedisError) {
            reply = try target.command(arguments)
        } catch  where error.code == .serverError {
            cluster.asked()
            throw error
        } catch {
            migrationTarget = nil
            throw error
        }
        cluster.asked()
        askedConnection = target
        return reply
    }

    /// A new connection to the migration's target, `ASKING` sent, kept as `migrationTarget`.
    private func askingConnection(
        to node: RedisNodeAddress, from connection: RedisConnection
    ) throws(RedisError) -> RedisConnection {
        migrationTarget = nil
        let target = RedisConnection(
            endpoint: connection.endpoint.at(node, database: 0), connectTimeout: connection.connectTimeout,
            commandTimeout: connection.commandTimeout)
        _ = try target.command("ASKING")
        migrationTarget = (node, target)
        return target
    }

    /// A keyless command about the write the previous command made (`WAIT`, which counts the
    /// replicas holding what one connection wrote; the `PUBLISH` that moves its offset), sent
    /// where that write ran: after an `ASK`, on the migration target's connection that ran it,
    /// not on this one to the source, whose replicas say nothing about it. Never on another
    /// node: when the slot's owner changed since the write (another connection met `MOVED`,
    /// or a failover), or the connection broke, it throws `connectionLost` (a caller waiting
    /// for replicas counts that as a shortfall).
    func commandAboutLastWrite(_ arguments: [[UInt8]], on connection: RedisConnection) throws(RedisError)
        -> RedisReply
    {
        if let askedConnection { return try askedConnection.command(arguments) }
        let owner = cluster.current
        guard connection.ready, owner == nil || owner == connectedNode else {
            let wrote = target ?? ""
            connection.disconnect()
            throw RedisError(
                .connectionLost,
                "the slot's owner changed after \(wrote) ran the write; its replicas are not asked elsewhere")
        }
        return try command(arguments, on: connection)
    }
}
