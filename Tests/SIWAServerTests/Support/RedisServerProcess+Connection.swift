import SIWARedis

extension RedisServerProcess {
    /// A plain connection over the unix socket, for the test's own reads (with TLS too).
    func unixSocketConnection() -> RedisConnection {
        RedisConnection(endpoint: RedisEndpoint(address: .unixSocket(path: unixSocketPath), password: password))
    }
}
