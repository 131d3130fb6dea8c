import Foundation

/// A Redis server's address as the settings and the servers name it: a host (a name, an
/// IPv4 address or an IPv6 address) and a port. Sentinels, the primary they name, and
/// cluster nodes are all named this way.
public struct RedisNodeAddress: Sendable, Hashable, CustomStringConvertible {
    public let host: String
    public let port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port`, with an IPv6 host in brackets.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Parses a setting's `host:port,host:port,...` (IPv6 hosts in brackets); the error says
    /// what is wrong and carries `field`, the setting the list came from.
    public static func list(parsing text: String, field: RedisError.Field) -> Result<[Self], RedisError> {
        func invalid(_ message: String) -> Result<[Self], RedisError> {
            .failure(RedisError(.invalidEndpoint, "\(message) (expected host:port,host:port,...)", field: field))
        }
        var addresses: [Self] = []
        for item in text.split(separator: ",") {
            let entry = item.trimmingCharacters(in: .whitespaces)
            let host: Substring
            let portText: Substring
            if entry.hasPrefix("["), let close = entry.firstIndex(of: "]") {
                host = entry[entry.index(after: entry.startIndex)..<close]
                let rest = entry[entry.index(after: close)...]
                guard rest.hasPrefix(":") else { return invalid("'\(entry)' has no :port") }
                portText = rest.dropFirst()
            } else if let colon = entry.lastIndex(of: ":") {
                host = entry[..<colon]
                portText = entry[entry.index(after: colon)...]
            } else {
                return invalid("'\(entry)' has no :port")
            }
            guard !host.isEmpty, !host.contains(where: { $0 == " " || $0 == "/" || $0 == "@" }) else {
                return invalid("'\(entry)' has no usable host")
            }
            guard portText.allSatisfy({ $0.isASCII && $0.isNumber }), let port = Int(portText),
                (1...65_535).contains(port)
            else {
                return invalid("'\(entry)' needs a port from 1 to 65535")
            }
            addresses.append(Self(host: String(host), port: port))
        }
        guard !addresses.isEmpty else { return invalid(field == .sentinels ? "names no sentinel" : "names no node") }
        return .success(addresses)
    }
}

extension RedisEndpoint {
    /// This endpoint's login and TLS at `node` (the primary the sentinels name, a cluster
    /// node, a sentinel): the URL's host and port are not used then. `database`: the URL's
    /// unless given (a cluster and a sentinel have only database 0).
    public func at(_ node: RedisNodeAddress, database: Int? = nil) -> RedisEndpoint {
        RedisEndpoint(
            address: .tcp(host: node.host, port: node.port), database: database ?? self.database, username: username,
            password: password, tls: tls)
    }
}
