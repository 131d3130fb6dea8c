/// One blocking connection to Redis, over a `RedisTransport` it opens: a TCP or unix
/// socket, with TLS for a `rediss://` endpoint; hiredis only formats the commands and
/// parses the replies.
///
/// NOT thread safe: each worker thread owns its own `RedisConnection` (create it inside
/// the thread's closure).
///
/// It connects lazily on the first command (or on `connect()`), with a connect
/// timeout and a command timeout, then sends AUTH and SELECT when the endpoint asks
/// for them. After an I/O error or a timeout the command throws `connectionLost`
/// (or `timedOut`) and the next command reconnects (a new socket, the handshake, AUTH
/// and SELECT again).
///
/// The transport writes with `write(2)`: a process using it must ignore SIGPIPE, or a
/// write to a connection Redis has closed kills the process.
public final class RedisConnection {
    public let endpoint: RedisEndpoint
    public let connectTimeout: Duration
    public let commandTimeout: Duration

    var transport: RedisTransport?
    /// Connected, timeout set, authenticated and on the right database.
    var ready = false

    /// With Sentinel: where the primary is. `endpoint` then gives only the database, user
    /// and password; its host and port are not used.
    public let locator: RedisPrimaryLocator?
    /// The primary this connection is on (with a locator).
    private var connectedPrimary: RedisPrimaryLocator.Primary?
    /// The locator's generation when this connection confirmed `connectedPrimary`.
    private var connectedGeneration: UInt64 = 0
    /// With Redis Cluster: which node owns the contract's slot. `endpoint` then gives only
    /// the user, password and TLS; its host and port are not used.
    public let cluster: RedisClusterLocator?
    /// The cluster node this connection is on (with a cluster locator).
    var connectedNode: RedisClusterLocator.Node?
    /// In cluster mode, when the last command was answered through `ASK`: the connection to
    /// the migration's target that ran it, where what concerns its write (`WAIT`) is asked.
    var askedConnection: RedisConnection?
    /// In cluster mode, while the slot moves: the connection to the migration's target, kept
    /// for the next `ASK` to the same node (not one per redirected command); dropped at
    /// `MOVED`, when this connection moves to another node, or when it fails.
    var migrationTarget: (node: RedisClusterLocator.Node, connection: RedisConnection)?

    /// The connect and command timeout when none is given (the settings table's default of
    /// the Redis timeout reads it from here).
    public static let defaultTimeout: Duration = .milliseconds(1000)
    /// The timeouts `validate()` accepts (the table's bounds of the Redis timeout read them).
    public static let timeoutRange: ClosedRange<Duration> = .milliseconds(10) ... .milliseconds(60_000)

    public init(
        endpoint: RedisEndpoint, connectTimeout: Duration = defaultTimeout, commandTimeout: Duration = defaultTimeout,
        locator: RedisPrimaryLocator? = nil, cluster: RedisClusterLocator? = nil
    ) {
        self.endpoint = endpoint
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.locator = locator
        self.cluster = cluster
    }

    /// Refuses timeouts outside `timeoutRange`, before anything is opened.
    public func validate() throws(RedisError) {
        for (name, timeout) in [("connectTimeout", connectTimeout), ("commandTimeout", commandTimeout)]
        where !Self.timeoutRange.contains(timeout) {
            throw RedisError(.invalidSetting, "\(name) must be \(Self.timeoutRange), got \(timeout)")
        }
    }

    /// Whether the last command left the connection usable (no I/O error since).
    public var isConnected: Bool { ready }

    /// Connects now if not connected; commands call this themselves.
    ///
    /// With Sentinel, a connection whose primary changed since it confirmed it (another
    /// connection found a new one, a sentinel announced `+switch-master`, or the address was
    /// forgotten after a failure) is closed and the command refused with `connectionLost`:
    /// nothing more goes to a node the sentinels may have demoted, and a caller that waits for
    /// replicas (`WAIT`) never counts them on a different node than its write. The next
    /// command connects to the primary the locator names now.
    public func connect() throws(RedisError) {
        if let cluster {
            try connectToSlotOwner(cluster)
            return
        }
        if ready {
            guard let locator, locator.generation != connectedGeneration else { return }
            let left = connectedPrimary.map(\.description) ?? "(unknown)"
            disconnect()
            throw RedisError(
                .connectionLost,
                "the Redis primary changed (this connection was on \(left), the sentinels name "
                    + "\(locator.current.map(\.description) ?? "none yet")); reconnecting")
        }
        if let locator {
            try connectToPrimary(locator)
            return
        }
        try open(endpoint.address)
        ready = true
    }

    /// Connects to the primary the locator names and confirms it with ROLE. Twice at most:
    /// an address that fails is forgotten, so the second try asks the sentinels again (and a
    /// discovery goes on to the next sentinel when an address is not a master).
    private func connectToPrimary(_ locator: RedisPrimaryLocator) throws(RedisError) {
        var lastError = RedisError(.connectionFailed, "no Redis primary")
        for _ in 0..<2 {
            do {
                let (primary, generation) = try locator.primary { candidate throws(RedisError) in
                    try self.openAndAskRole(candidate)
                }
                connectedPrimary = primary
                connectedGeneration = generation
                ready = true
                return
            } catch {
                disconnect()
                lastError = error
                // The sentinels answered, but not about a usable primary: asking again now finds the same.
                if !error.isConnectionError { break }
            }
        }
        throw lastError
    }

    /// Opens a connection to `candidate` (closing any other) and asks its ROLE.
    private func openAndAskRole(_ candidate: RedisPrimaryLocator.Primary) throws(RedisError)
        -> RedisPrimaryLocator.Role
    {
        disconnect()
        connectedPrimary = candidate
        do {
            try open(.tcp(host: candidate.host, port: candidate.port))
            let role = try confirmPrimary()
            if role != .master { disconnect() }
            return role
        } catch {
            disconnect()
            throw error
        }
    }

    /// Sentinel's answer may be stale during a failover, or come from a sentinel that missed
    /// it: only a node whose ROLE is master is used.
    func confirmPrimary() throws(RedisError) -> RedisPrimaryLocator.Role {
        guard let transport else { throw RedisError(.connectionFailed, "no Redis connection") }
        let role = try send([Array("ROLE".utf8)], on: transport).array?.first?.string ?? "?"
        return role == "master" ? .master : .other(role)
    }

    /// A new socket (and TLS handshake) to `address`, then AUTH and SELECT.
    func open(_ address: RedisEndpoint.Address) throws(RedisError) {
        transport = nil
        do throws(RedisTransport.Failure) {
            transport = try RedisTransport.open(
                address, tls: endpoint.tls, connectTimeout: connectTimeout, commandTimeout: commandTimeout)
        } catch {
            throw failure(.connectionFailed, error)
        }
        guard let transport else { throw RedisError(.connectionFailed, "no Redis connection") }
        try login(transport)
    }

    /// Closes the socket; the next command reconnects.
    public func disconnect() {
        transport = nil
        ready = false
    }

    /// The primary this connection uses (with Sentinel), else nil.
    public var primary: RedisPrimaryLocator.Primary? { ready ? connectedPrimary : nil }

    /// The node failed or is no longer the primary: the next connection asks the sentinels.
    private func forgetPrimary() {
        if let locator, let connectedPrimary { locator.forget(connectedPrimary) }
    }

    /// Sends one command; arguments are binary safe. A top-level error reply throws
    /// `serverError` with Redis's text.
    ///
    /// With Sentinel, a reply that arrives after the primary changed is not trusted (the node
    /// may have run the command after the sentinels demoted it, as a node paused past a
    /// failover does when it resumes): the connection is closed and `connectionLost` thrown.
    public func command(_ arguments: [[UInt8]]) throws(RedisError) -> RedisReply {
        if let cluster { return try clusterCommand(arguments, cluster) }
        try connect()
        guard let transport else { throw RedisError(.connectionLost, "no Redis connection") }
        let reply = try send(arguments, on: transport)
        if let locator, locator.generation != connectedGeneration {
            let left = connectedPrimary.map(\.description) ?? "(unknown)"
            disconnect()
            throw RedisError(
                .connectionLost, "the Redis primary changed while \(left) ran the command; its answer is not used")
        }
        return reply
    }

    /// Sends one command whose arguments are text.
    public func command(_ arguments: [String]) throws(RedisError) -> RedisReply {
        try command(arguments.map { Array($0.utf8) })
    }

    /// Sends one command whose arguments are text.
    public func command(_ arguments: String...) throws(RedisError) -> RedisReply {
        try command(arguments)
    }

    /// Waits up to the command timeout for a reply the server sends unasked: a pub/sub
    /// message after `SUBSCRIBE`. A timeout throws `timedOut` and leaves the connection closed.
    public func nextPushedReply() throws(RedisError) -> RedisReply {
        guard ready, let transport else { throw RedisError(.connectionLost, "no Redis connection") }
        do throws(RedisTransport.Failure) {
            return try transport.nextReply()
        } catch {
            let failed = failure(.connectionLost, error)
            disconnect()
            throw failed
        }
    }

    // MARK: - Below: the exchanges

    private func login(_ transport: RedisTransport) throws(RedisError) {
        var authenticated = endpoint.password == nil
        do {
            if let password = endpoint.password {
                let arguments = ["AUTH"] + (endpoint.username.map { [$0] } ?? []) + [password]
                _ = try send(arguments.map { Array($0.utf8) }, on: transport)
                authenticated = true
            }
            if endpoint.database != 0 {
                _ = try send([Array("SELECT".utf8), Array(String(endpoint.database).utf8)], on: transport)
            }
        } catch {
            // The server's AUTH/SELECT text names no secret, but a half-logged-in
            // connection must not be used: drop it and start over next time.
            disconnect()
            let step = endpoint.password == nil ? "SELECT \(endpoint.database)" : "AUTH or SELECT"
            // An error reply to AUTH is a refused login; anything else (SELECT, the socket) is not.
            let refused = !authenticated && error.code == .serverError
            throw RedisError(
                .connectionFailed, "\(step) failed on \(target): \(error.message)",
                cause: refused ? .loginRefused(error) : .underlying(error))
        }
    }

    func send(_ arguments: [[UInt8]], on transport: RedisTransport) throws(RedisError) -> RedisReply {
        let reply: RedisReply
        do throws(RedisTransport.Failure) {
            reply = try transport.roundTrip(arguments)
        } catch {
            // The stream may hold half a reply: it is never used again.
            self.transport = nil
            ready = false
            forgetPrimary()
            forgetNode()
            throw failure(.connectionLost, error)
        }
        if case .error(let text) = reply {
            let shown = String(text.prefix(Self.maximumServerErrorLength))
            let kind = RedisError.ReplyKind(reply: text)
            // A script's error from Redis before 7 wraps the READONLY it met in an ERR.
            if locator != nil, kind == .readOnly || text.contains("READONLY You can't write") {
                // A demoted primary: a connection problem, so the caller retries on the new one.
                forgetPrimary()
                disconnect()
                throw RedisError(.connectionLost, "\(shown) (the node is a replica now; asking the sentinels again)")
            }
            if cluster != nil, let kind, Self.clusterTrouble.contains(kind) {
                // The node lost the slot's primary role or the cluster is failing over: ask it again.
                forgetNode()
                disconnect()
                throw RedisError(.connectionLost, "\(shown) (on \(target); asking the cluster again)")
            }
            throw RedisError(.serverError, shown)
        }
        return reply
    }

    /// Redis error replies are short; the cap keeps a surprising one out of the logs.
    private static let maximumServerErrorLength = 300

    private func failure(_ code: RedisError.Code, _ problem: RedisTransport.Failure) -> RedisError {
        ready = false
        let verb = code == .connectionFailed ? "could not connect to" : "lost the connection to"
        // A timeout: the call may still run once Redis resumes.
        let reported: RedisError.Code =
            switch problem.kind {
            case .timedOut: .timedOut
            case .tlsRefused: .tlsRefused
            default: code
            }
        return RedisError(
            reported, "\(verb) \(target): \(problem.detail.isEmpty ? "unknown error" : problem.detail)",
            cause: .hiredis(code: problem.hiredisCode), field: problem.field,
            certificateRefusal: problem.certificateRefusal)
    }

    /// What the messages name: the endpoint, or the primary the sentinels gave.
    var target: String {
        if cluster != nil { return "the cluster node \(connectedNode.map(\.description) ?? "(unknown)")" }
        guard locator != nil else { return endpoint.description }
        return "the Redis primary \(connectedPrimary.map(\.description) ?? "(unknown)") (from the sentinels)"
    }
}
