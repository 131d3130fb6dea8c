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

    /// Where the node is: one Redis at `endpoint`, or the process's Sentinel or Cluster
    /// locator (then `endpoint` gives only the login, database and TLS; its host and port
    /// are not used).
    public let locator: RedisLocator
    /// What this connection keeps about the node it is on, for its topology.
    let routing: any RedisRouting

    /// The connect and command timeout when none is given (the settings table's default of
    /// the Redis timeout reads it from here).
    public static let defaultTimeout: Duration = .milliseconds(1000)
    /// The timeouts `validate()` accepts (the table's bounds of the Redis timeout read them).
    public static let timeoutRange: ClosedRange<Duration> = .milliseconds(10) ... .milliseconds(60_000)

    public init(
        endpoint: RedisEndpoint, connectTimeout: Duration = defaultTimeout, commandTimeout: Duration = defaultTimeout,
        locator: RedisLocator = .single
    ) {
        self.endpoint = endpoint
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.locator = locator
        routing = locator.routing()
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

    /// Connects now if not connected; commands call this themselves. With Sentinel or
    /// Cluster, to the node the locator names, confirmed by `ROLE` (see `SentinelRouting`,
    /// `ClusterRouting`).
    public func connect() throws(RedisError) {
        try routing.connect(self)
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
                address, tls: endpoint.tls, resolver: endpoint.resolver, connectTimeout: connectTimeout,
                commandTimeout: commandTimeout)
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
    public var primary: RedisNodeAddress? {
        guard ready, case .sentinel = locator else { return nil }
        return routing.node
    }

    /// The cluster node this connection uses (in cluster mode), else nil.
    public var clusterNode: RedisNodeAddress? {
        guard ready, case .cluster = locator else { return nil }
        return routing.node
    }

    /// Sends one command; arguments are binary safe. A top-level error reply throws
    /// `serverError` with Redis's text.
    ///
    /// With Sentinel, a reply that arrives after the primary changed is not trusted (the node
    /// may have run the command after the sentinels demoted it, as a node paused past a
    /// failover does when it resumes): the connection is closed and `connectionLost` thrown.
    /// In a cluster, `MOVED` and `ASK` are followed.
    public func command(_ arguments: [[UInt8]]) throws(RedisError) -> RedisReply {
        try routing.command(arguments, on: self)
    }

    /// A keyless command about the write the previous command made (`WAIT`, which counts the
    /// replicas holding what one connection wrote; the `PUBLISH` that moves its offset), sent
    /// where that write ran (see `ClusterRouting.commandAboutLastWrite`). Outside cluster
    /// mode, `command`.
    public func commandAboutLastWrite(_ arguments: String...) throws(RedisError) -> RedisReply {
        try routing.commandAboutLastWrite(arguments.map { Array($0.utf8) }, on: self)
    }

    /// Connects (or stays), then sends the command on this connection's socket.
    func sendHere(_ arguments: [[UInt8]]) throws(RedisError) -> RedisReply {
        try connect()
        guard let transport else { throw RedisError(.connectionLost, "no Redis connection") }
        return try send(arguments, on: transport)
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
            routing.connectionFailed()
            throw failure(.connectionLost, error)
        }
        if case .error(let text) = reply {
            let shown = String(text.prefix(Self.maximumServerErrorLength))
            // The node is no longer where to write (a demoted primary, a cluster in trouble):
            // a connection problem, so the caller retries where the locator names next.
            if let moved = routing.nodeTrouble(reply: text, shown: shown) {
                disconnect()
                throw moved
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

    /// What the messages name: the endpoint, the primary the sentinels gave, or the cluster node.
    var target: String { routing.target ?? endpoint.description }
}
