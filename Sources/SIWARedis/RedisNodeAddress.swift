/// A Redis server's address as the settings name it: a host (a name, an IPv4 address or
/// an IPv6 address) and a port. Sentinels and cluster nodes are both named this way.
public struct RedisNodeAddress: Sendable, Hashable, CustomStringConvertible {
    public let host: String
    public let port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port`, with an IPv6 host in brackets.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
