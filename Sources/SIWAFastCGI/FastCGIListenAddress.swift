/// Where the responder listens: a unix socket (the normal case, next to nginx) or a TCP
/// port on the loopback interface. Any other host is refused: the responder trusts its
/// peer to be nginx, so it must never be reachable from the network.
public enum FastCGIListenAddress: Sendable, Equatable, CustomStringConvertible {
    /// A unix socket file. A stale file at `path` is removed at start; the socket gets
    /// `mode` and, if named, `group` before it accepts anything.
    case unixSocket(path: String, mode: UInt32 = 0o660, group: String? = nil)
    /// A loopback address (IPv4 127.0.0.0/8, or IPv6 `::1`) and port. Port 0 asks the
    /// kernel for a free port; `FastCGIServer.boundPort` tells which one.
    case loopbackTCP(host: String = "127.0.0.1", port: UInt16)

    public var description: String {
        switch self {
        case .unixSocket(let path, _, _): "unix:\(path)"
        case .loopbackTCP(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        }
    }

    /// Parses the configuration form: an absolute path (`/run/siwa/fcgi.sock`, optionally
    /// prefixed `unix:`) or `127.0.0.1:PORT` / `[::1]:PORT`. A bare `:PORT`, `0.0.0.0`,
    /// `[::]`, a name (`localhost` too: what it resolves to is not ours to decide) or any
    /// non-loopback host throws `nonLoopbackHost`. `SIWA_FCGI_SOCKET` is read with this.
    public static func parse(_ text: String, mode: UInt32 = 0o660, group: String? = nil) throws(FastCGIError)
        -> FastCGIListenAddress
    {
        var value = Substring(text)
        if value.hasPrefix("unix:") { value = value.dropFirst("unix:".count) }
        if value.hasPrefix("/") {
            guard !value.contains("\0"), value.utf8.count < 108 else {
                throw FastCGIError(.invalidListenAddress, "unix socket path is empty, too long or has a NUL byte")
            }
            return .unixSocket(path: String(value), mode: mode, group: group)
        }
        guard let colon = value.lastIndex(of: ":") else {
            throw FastCGIError(.invalidListenAddress, "listen address is neither an absolute path nor host:port")
        }
        var host = String(value[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard let port = UInt16(value[value.index(after: colon)...]), port != 0 else {
            throw FastCGIError(.invalidListenAddress, "listen port must be 1...65535")
        }
        guard isLoopback(host) else {
            throw FastCGIError(
                .nonLoopbackHost, "listen host must be 127.x.x.x or [::1]; \"\(host)\" would expose the responder")
        }
        return .loopbackTCP(host: host, port: port)
    }

    /// True for `::1` or a dotted-quad address inside 127.0.0.0/8.
    static func isLoopback(_ host: String) -> Bool { host == "::1" || isIPv4Loopback(host) }

    /// True for a dotted-quad address inside 127.0.0.0/8, written in canonical form.
    static func isIPv4Loopback(_ host: String) -> Bool {
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return false }
        let octets = parts.compactMap { part -> UInt8? in
            guard !part.isEmpty, part.count <= 3, part.allSatisfy(\.isASCII), part.allSatisfy(\.isNumber) else {
                return nil
            }
            return UInt8(part)
        }
        return octets.count == 4 && octets[0] == 127
    }
}
