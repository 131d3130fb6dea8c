/// Where Redis is and how to log in: parsed once at start from a URL.
///
/// Accepted forms:
/// - `redis://host[:port][/db]`, port 6379 and database 0 by default; IPv6 hosts in
///   brackets (`redis://[::1]:6379/0`);
/// - `redis://:password@host:port/db` (or `user:password@` for a Redis 6 ACL user);
///   the password may be percent-encoded;
/// - `rediss://...`: the same as `redis://`, over TLS (see `RedisTLS`);
/// - `unix:///absolute/path/to/redis.sock[?db=N]`.
public struct RedisEndpoint: Sendable, Equatable, CustomStringConvertible {
    /// The transport.
    public enum Address: Sendable, Equatable {
        case tcp(host: String, port: Int)
        case unixSocket(path: String)
    }

    public let address: Address
    /// The database selected after connecting (SELECT is sent only when not 0).
    public let database: Int
    /// The ACL user for AUTH, when one is named.
    public let username: String?
    /// The password for AUTH; never part of `description`.
    public let password: String?
    /// TLS over the TCP connection (a `rediss://` URL), with the files it uses; nil: plain.
    public var tls: RedisTLS?
    /// How a host name of this endpoint (or of a primary or node it leads to) is resolved:
    /// within the connect timeout, from the system's configuration unless a test says otherwise.
    public var resolver: RedisHostResolver = .system

    public init(
        address: Address, database: Int = 0, username: String? = nil, password: String? = nil, tls: RedisTLS? = nil
    ) {
        self.address = address
        self.database = database
        self.username = username
        self.password = password
        self.tls = tls
    }

    /// Parses a Redis URL; the error names the part that is wrong and never echoes a password.
    public init(parsing text: String) throws(RedisError) {
        if text.hasPrefix("redis://") {
            self = try Self.parseTCP(String(text.dropFirst("redis://".count)))
        } else if text.hasPrefix("unix://") {
            self = try Self.parseUnix(String(text.dropFirst("unix://".count)))
        } else if text.hasPrefix("rediss://") {
            self = try Self.parseTCP(String(text.dropFirst("rediss://".count)))
            tls = RedisTLS()
        } else {
            throw Self.invalid("the Redis URL must start with redis://, rediss:// (TLS) or unix://")
        }
    }

    /// The endpoint without its password, for logs.
    public var description: String {
        let credentials = password == nil ? "" : "\(username ?? ""):***@"
        switch address {
        case .tcp(let host, let port):
            let shownHost = host.contains(":") ? "[\(host)]" : host
            return "\(tls == nil ? "redis" : "rediss")://\(credentials)\(shownHost):\(port)/\(database)"
        case .unixSocket(let path):
            return "unix://\(path)?db=\(database)" + (password == nil ? "" : "&password=***")
        }
    }

    private static let maximumDatabase = Int(Int32.max)

    private static func invalid(_ message: String) -> RedisError { RedisError(.invalidEndpoint, message) }

    private static func parseTCP(_ rest: String) throws(RedisError) -> RedisEndpoint {
        if rest.contains("?") || rest.contains("#") {
            throw invalid("a redis:// or rediss:// URL takes no query or fragment; put the database in the path (/N)")
        }
        let authority: Substring
        let path: Substring
        if let slash = rest.firstIndex(of: "/") {
            authority = rest[..<slash]
            path = rest[rest.index(after: slash)...]
        } else {
            authority = rest[...]
            path = ""
        }

        var username: String?
        var password: String?
        var hostPort = authority
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            hostPort = authority[authority.index(after: at)...]
            guard let colon = userInfo.firstIndex(of: ":") else {
                throw invalid("the user info must be ':password@' or 'user:password@'")
            }
            let user = try percentDecoded(userInfo[..<colon], part: "user name")
            let secret = try percentDecoded(userInfo[userInfo.index(after: colon)...], part: "password")
            guard !secret.isEmpty else { throw invalid("the password after ':' is empty") }
            username = user.isEmpty ? nil : user
            password = secret
        }

        let host: String
        var portText: Substring?
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else { throw invalid("the IPv6 host has no closing ']'") }
            host = String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
            let afterHost = hostPort[hostPort.index(after: close)...]
            if !afterHost.isEmpty {
                guard afterHost.hasPrefix(":") else { throw invalid("unexpected text after the IPv6 host") }
                portText = afterHost.dropFirst()
            }
        } else if let colon = hostPort.firstIndex(of: ":") {
            host = String(hostPort[..<colon])
            portText = hostPort[hostPort.index(after: colon)...]
        } else {
            host = String(hostPort)
        }
        guard !host.isEmpty else { throw invalid("the host is missing") }
        guard !host.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F || $0 == "/" }) else {
            throw invalid("the host contains a space or control character")
        }

        var port = 6379
        if let portText {
            guard let value = decimal(portText), (1...65535).contains(value) else {
                throw invalid("the port must be a number from 1 to 65535")
            }
            port = value
        }

        var database = 0
        if !path.isEmpty {
            guard let value = decimal(path), value <= maximumDatabase else {
                throw invalid("the path must be a database number (/0, /1, ...)")
            }
            database = value
        }
        return RedisEndpoint(
            address: .tcp(host: host, port: port), database: database, username: username, password: password)
    }

    private static func parseUnix(_ rest: String) throws(RedisError) -> RedisEndpoint {
        if rest.contains("#") { throw invalid("a unix:// URL takes no fragment") }
        let path: Substring
        let query: Substring?
        if let question = rest.firstIndex(of: "?") {
            path = rest[..<question]
            query = rest[rest.index(after: question)...]
        } else {
            path = rest[...]
            query = nil
        }
        guard path.hasPrefix("/"), path.count > 1 else {
            throw invalid("the socket path must be absolute: unix:///path/to/redis.sock")
        }
        guard !path.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw invalid("the socket path contains a control character")
        }

        var database = 0
        var password: String?
        var seen: Set<Substring> = []
        for pair in (query ?? "").split(separator: "&", omittingEmptySubsequences: true) {
            guard let equals = pair.firstIndex(of: "=") else { throw invalid("a query parameter has no '='") }
            let name = pair[..<equals]
            let value = pair[pair.index(after: equals)...]
            guard seen.insert(name).inserted else { throw invalid("the query names '\(name)' twice") }
            switch name {
            case "db":
                guard let number = decimal(value), number <= maximumDatabase else {
                    throw invalid("db must be a database number")
                }
                database = number
            case "password":
                let secret = try percentDecoded(value, part: "password")
                guard !secret.isEmpty else { throw invalid("the password parameter is empty") }
                password = secret
            default:
                throw invalid("unknown query parameter (only db and password are accepted)")
            }
        }
        return RedisEndpoint(address: .unixSocket(path: String(path)), database: database, password: password)
    }

    /// Plain ASCII digits only: no sign, no spaces, at most 10 digits.
    private static func decimal(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.count <= 10, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(text)
    }

    private static func percentDecoded(_ text: Substring, part: String) throws(RedisError) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                throw invalid("the \(part) has a bad percent escape")
            }
            bytes.append(high << 4 | low)
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else {
            throw invalid("the \(part) is not valid UTF-8 once decoded")
        }
        return decoded
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
