import CHiredis
import Glibc

/// One blocking connection to Redis: the thin wrapper over hiredis, where every
/// hiredis pointer lives.
///
/// NOT thread safe: a `redisContext` must not be shared, so each worker thread owns
/// its own `RedisConnection` (create it inside the thread's closure).
///
/// It connects lazily on the first command (or on `connect()`), with a connect
/// timeout and a command timeout, then sends AUTH and SELECT when the endpoint asks
/// for them. After an I/O error or a timeout the command throws `connectionLost`
/// and the next command reconnects (`redisReconnect`, then the command timeout,
/// AUTH and SELECT again: hiredis 0.14.1 forgets the socket timeout on reconnect).
///
/// hiredis writes with `write(2)`: a process using it must ignore SIGPIPE, or a
/// write to a connection Redis has closed kills the process.
public final class RedisConnection {
    public let endpoint: RedisEndpoint
    public let connectTimeout: Duration
    public let commandTimeout: Duration

    private var context: UnsafeMutablePointer<redisContext>?
    /// Connected, timeout set, authenticated and on the right database.
    private var ready = false

    /// With Sentinel: where the primary is. `endpoint` then gives only the database, user
    /// and password; its host and port are not used.
    public let locator: RedisPrimaryLocator?
    /// The primary this connection is on (with a locator).
    private var connectedPrimary: RedisPrimaryLocator.Primary?
    /// The locator's generation when this connection confirmed `connectedPrimary`.
    private var connectedGeneration: UInt64 = 0

    public init(
        endpoint: RedisEndpoint, connectTimeout: Duration = .seconds(1), commandTimeout: Duration = .seconds(2),
        locator: RedisPrimaryLocator? = nil
    ) {
        self.endpoint = endpoint
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.locator = locator
    }

    deinit {
        if let context { redisFree(context) }
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
            let role = try confirmPrimary(candidate)
            if role != .master { disconnect() }
            return role
        } catch {
            disconnect()
            throw error
        }
    }

    /// Sentinel's answer may be stale during a failover, or come from a sentinel that missed
    /// it: only a node whose ROLE is master is used.
    private func confirmPrimary(_ primary: RedisPrimaryLocator.Primary) throws(RedisError)
        -> RedisPrimaryLocator.Role
    {
        guard let context else { throw RedisError(.connectionFailed, "no Redis connection") }
        let role = try send([Array("ROLE".utf8)], on: context).array?.first?.string ?? "?"
        return role == "master" ? .master : .other(role)
    }

    private func open(_ address: RedisEndpoint.Address) throws(RedisError) {
        if let context {
            guard redisReconnect(context) == REDIS_OK else { throw failure(.connectionFailed, context) }
        } else {
            let connectTimeval = Self.makeTimeval(connectTimeout)
            let created: UnsafeMutablePointer<redisContext>? =
                switch address {
                case .tcp(let host, let port): redisConnectWithTimeout(host, Int32(port), connectTimeval)
                case .unixSocket(let path): redisConnectUnixWithTimeout(path, connectTimeval)
                }
            guard let created else {
                throw RedisError(.connectionFailed, "could not allocate a Redis connection to \(target)")
            }
            // Kept even when the connect failed: redisReconnect reuses its address.
            context = created
            guard created.pointee.err == 0 else { throw failure(.connectionFailed, created) }
        }
        guard let context else { throw RedisError(.connectionFailed, "no Redis connection") }
        guard redisSetTimeout(context, Self.makeTimeval(commandTimeout)) == REDIS_OK else {
            throw failure(.connectionFailed, context)
        }
        try login(context)
    }

    /// Closes the socket; the next command reconnects.
    public func disconnect() {
        if let context { redisFree(context) }
        context = nil
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
        try connect()
        guard let context else { throw RedisError(.connectionLost, "no Redis connection") }
        let reply = try send(arguments, on: context)
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
        guard ready, let context else { throw RedisError(.connectionLost, "no Redis connection") }
        var raw: UnsafeMutableRawPointer?
        guard redisGetReply(context, &raw) == REDIS_OK, let raw else {
            let error = failure(.connectionLost, context)
            disconnect()
            throw error
        }
        let reply = Self.convert(raw.assumingMemoryBound(to: redisReply.self))
        freeReplyObject(raw)
        return reply
    }

    // MARK: - Below: hiredis calls

    private func login(_ context: UnsafeMutablePointer<redisContext>) throws(RedisError) {
        do {
            if let password = endpoint.password {
                let arguments = ["AUTH"] + (endpoint.username.map { [$0] } ?? []) + [password]
                _ = try send(arguments.map { Array($0.utf8) }, on: context)
            }
            if endpoint.database != 0 {
                _ = try send([Array("SELECT".utf8), Array(String(endpoint.database).utf8)], on: context)
            }
        } catch {
            // The server's AUTH/SELECT text names no secret, but a half-logged-in
            // connection must not be used: drop it and start over next time.
            disconnect()
            let step = endpoint.password == nil ? "SELECT \(endpoint.database)" : "AUTH or SELECT"
            throw RedisError(
                .connectionFailed, "\(step) failed on \(target): \(error.message)", cause: .underlying(error))
        }
    }

    private func send(_ arguments: [[UInt8]], on context: UnsafeMutablePointer<redisContext>) throws(RedisError)
        -> RedisReply
    {
        // One contiguous buffer keeps every argument's address valid during the call.
        let joined = arguments.flatMap { $0 }
        let lengths = arguments.map { $0.count }
        let raw: UnsafeMutableRawPointer? = joined.withUnsafeBufferPointer { buffer in
            let base = UnsafeRawPointer(buffer.baseAddress)
            var offsets: [Int] = []
            var offset = 0
            for length in lengths {
                offsets.append(offset)
                offset += length
            }
            // An empty argument still needs a non-null pointer.
            let empty: StaticString = ""
            var pointers: [UnsafePointer<CChar>?] = offsets.map { start in
                guard let base else { return UnsafeRawPointer(empty.utf8Start).assumingMemoryBound(to: CChar.self) }
                return (base + start).assumingMemoryBound(to: CChar.self)
            }
            return pointers.withUnsafeMutableBufferPointer { argv in
                lengths.withUnsafeBufferPointer { argvlen in
                    redisCommandArgv(context, Int32(arguments.count), argv.baseAddress, argvlen.baseAddress)
                }
            }
        }
        guard let raw else {
            ready = false
            forgetPrimary()
            throw failure(.connectionLost, context)
        }
        let replyPointer = raw.assumingMemoryBound(to: redisReply.self)
        let reply = Self.convert(replyPointer)
        freeReplyObject(raw)
        if case .error(let text) = reply {
            let shown = String(text.prefix(Self.maximumServerErrorLength))
            if locator != nil, text.hasPrefix("READONLY") || text.contains("READONLY You can't write") {
                // A demoted primary: a connection problem, so the caller retries on the new one.
                forgetPrimary()
                disconnect()
                throw RedisError(.connectionLost, "\(shown) (the node is a replica now; asking the sentinels again)")
            }
            throw RedisError(.serverError, shown)
        }
        return reply
    }

    /// Redis error replies are short; the cap keeps a surprising one out of the logs.
    private static let maximumServerErrorLength = 300

    private static func convert(_ pointer: UnsafeMutablePointer<redisReply>) -> RedisReply {
        let reply = pointer.pointee
        func bytes() -> [UInt8] {
            guard let text = reply.str, reply.len > 0 else { return [] }
            return Array(UnsafeRawBufferPointer(start: text, count: reply.len))
        }
        switch reply.type {
        case REDIS_REPLY_STATUS: return .status(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_ERROR: return .error(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_INTEGER: return .integer(Int64(reply.integer))
        case REDIS_REPLY_STRING: return .bulkString(bytes())
        case REDIS_REPLY_ARRAY:
            guard let elements = reply.element else { return .array([]) }
            return .array((0..<reply.elements).compactMap { index in elements[index].map(convert) })
        default: return .null
        }
    }

    private func failure(_ code: RedisError.Code, _ context: UnsafeMutablePointer<redisContext>) -> RedisError {
        ready = false
        let detail = withUnsafeBytes(of: context.pointee.errstr) { buffer in
            String(decoding: buffer.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        let verb = code == .connectionFailed ? "could not connect to" : "lost the connection to"
        // hiredis reports a socket timeout as the errno text of EAGAIN (a command) or
        // ETIMEDOUT (connecting): the call may still run once Redis resumes.
        let timedOut = [EAGAIN, EWOULDBLOCK, ETIMEDOUT].contains { detail == String(cString: strerror($0)) }
        return RedisError(
            timedOut ? .timedOut : code, "\(verb) \(target): \(detail.isEmpty ? "unknown error" : detail)",
            cause: .hiredis(code: context.pointee.err))
    }

    /// What the messages name: the endpoint, or the primary the sentinels gave.
    private var target: String {
        guard locator != nil else { return endpoint.description }
        return "the Redis primary \(connectedPrimary.map(\.description) ?? "(unknown)") (from the sentinels)"
    }

    private static func makeTimeval(_ duration: Duration) -> timeval {
        let (seconds, attoseconds) = duration.components
        return timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
    }
}
