/// Redis Sentinel: the connection goes to the primary the sentinels name, confirmed with
/// `ROLE`, and leaves it as soon as the locator's primary changes (see `RedisPrimaryLocator`).
final class SentinelRouting: RedisRouting {
    let locator: RedisPrimaryLocator
    /// The primary this connection is on.
    private var connectedPrimary: RedisNodeAddress?
    /// The locator's generation when this connection confirmed `connectedPrimary`.
    private var connectedGeneration: UInt64 = 0

    init(_ locator: RedisPrimaryLocator) {
        self.locator = locator
    }

    var node: RedisNodeAddress? { connectedPrimary }

    var target: String? {
        "the Redis primary \(connectedPrimary.map(\.description) ?? "(unknown)") (from the sentinels)"
    }

    /// A connection whose primary changed since it confirmed it (another connection found a
    /// new one, a sentinel announced `+switch-master`, or the address was forgotten after a
    /// failure) is closed and the command refused with `connectionLost`: nothing more goes to
    /// a node the sentinels may have demoted, and a caller that waits for replicas (`WAIT`)
    /// never counts them on a different node than its write. The next command connects to
    /// the primary the locator names now.
    func connect(_ connection: RedisConnection) throws(RedisError) {
        if connection.ready {
            guard locator.generation != connectedGeneration else { return }
            let left = connectedPrimary.map(\.description) ?? "(unknown)"
            connection.disconnect()
            throw RedisError(
                .connectionLost,
                "the Redis primary changed (this connection was on \(left), the sentinels name "
                    + "\(locator.current.map(\.description) ?? "none yet")); reconnecting")
        }
        try connectToPrimary(connection)
    }

    /// A reply that arrives after the primary changed is not trusted.
    func command(_ arguments: [[UInt8]], on connection: RedisConnection) throws(RedisError) -> RedisReply {
        let reply = try connection.sendHere(arguments)
        if locator.generation != connectedGeneration {
            let left = connectedPrimary.map(\.description) ?? "(unknown)"
            connection.disconnect()
            throw RedisError(
                .connectionLost, "the Redis primary changed while \(left) ran the command; its answer is not used")
        }
        return reply
    }

    /// `READONLY`: a demoted primary. A script's error from Redis before 7 wraps the
    /// `READONLY` it met in an `ERR`.
    func nodeTrouble(reply text: String, shown: String) -> RedisError? {
        guard RedisError.ReplyKind(reply: text) == .readOnly || text.contains("READONLY You can't write") else {
            return nil
        }
        connectionFailed()
        return RedisError(.connectionLost, "\(shown) (the node is a replica now; asking the sentinels again)")
    }

    /// The node failed or is no longer the primary: the next connection asks the sentinels.
    func connectionFailed() {
        if let connectedPrimary { locator.forget(connectedPrimary) }
    }

    /// Connects to the primary the locator names and confirms it with ROLE. Twice at most:
    /// an address that fails is forgotten, so the second try asks the sentinels again (and a
    /// discovery goes on to the next sentinel when an address is not a master).
    private func connectToPrimary(_ connection: RedisConnection) throws(RedisError) {
        var lastError = RedisError(.connectionFailed, "no Redis primary")
        for _ in 0..<2 {
            do {
                let (primary, generation) = try locator.primary { candidate throws(RedisError) in
                    try self.openAndAskRole(candidate, connection)
                }
                connectedPrimary = primary
                connectedGeneration = generation
                connection.ready = true
                return
            } catch {
                connection.disconnect()
                lastError = error
                // The sentinels answered, but not about a usable primary: asking again now finds the same.
                if !error.isConnectionError { break }
            }
        }
        throw lastError
    }

    /// Opens a connection to `candidate` (closing any other) and asks its ROLE.
    private func openAndAskRole(
        _ candidate: RedisNodeAddress, _ connection: RedisConnection
    ) throws(RedisError) -> RedisPrimaryLocator.Role {
        connection.disconnect()
        connectedPrimary = candidate
        do {
            try connection.open(.tcp(host: candidate.host, port: candidate.port))
            let role = try connection.confirmPrimary()
            if role != .master { connection.disconnect() }
            return role
        } catch {
            connection.disconnect()
            throw error
        }
    }
}
