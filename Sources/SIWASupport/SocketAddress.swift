import Glibc

/// A stream socket's address, built once from what a configuration names: a unix socket
/// path or an IP literal and a port (never a host name: what a name resolves to is not ours
/// to decide). The FastCGI listener binds with it, the FastCGI client connects with it.
public struct SocketAddress {
    public enum Invalid: Error, Equatable {
        /// The unix socket path does not fit `sun_path` with its terminating NUL.
        case pathTooLong
        /// The host is not an IPv4 dotted quad or an IPv6 literal.
        case notAnIPAddress
    }

    /// `AF_UNIX`, `AF_INET` or `AF_INET6`.
    public let family: Int32
    private var storage = sockaddr_storage()
    private let length: socklen_t

    /// A unix socket file at `path`.
    public static func unixSocket(path: String) throws(Invalid) -> SocketAddress {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw .pathTooLong }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        var result = SocketAddress(family: AF_UNIX, length: socklen_t(MemoryLayout<sockaddr_un>.size))
        withUnsafeMutableBytes(of: &result.storage) { raw in
            withUnsafeBytes(of: &address) { raw.copyMemory(from: $0) }
        }
        return result
    }

    /// An IPv4 (`127.0.0.1`) or IPv6 (`::1`, without brackets) literal and a port.
    public static func internet(host: String, port: UInt16) throws(Invalid) -> SocketAddress {
        let isIPv6 = host.contains(":")
        var result = SocketAddress(
            family: isIPv6 ? AF_INET6 : AF_INET,
            length: socklen_t(isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size))
        let parsed = withUnsafeMutableBytes(of: &result.storage) { raw -> Bool in
            if isIPv6 {
                let address = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self)
                address.pointee.sin6_family = sa_family_t(AF_INET6)
                address.pointee.sin6_port = port.bigEndian
                return inet_pton(AF_INET6, host, &address.pointee.sin6_addr) == 1
            }
            let address = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self)
            address.pointee.sin_family = sa_family_t(AF_INET)
            address.pointee.sin_port = port.bigEndian
            return inet_pton(AF_INET, host, &address.pointee.sin_addr) == 1
        }
        guard parsed else { throw .notAnIPAddress }
        return result
    }

    private init(family: Int32, length: socklen_t) {
        self.family = family
        self.length = length
    }

    /// A new blocking stream socket of this address's family, closed on exec; -1 and
    /// `errno` on failure, as socket(2).
    public func makeStreamSocket() -> Int32 {
        socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    }

    /// bind(2) of `descriptor` to this address: 0, or -1 and `errno`.
    public func bind(_ descriptor: Int32) -> Int32 {
        withGenericAddress { Glibc.bind(descriptor, $0, $1) }
    }

    /// connect(2) of `descriptor` to this address: 0, or -1 and `errno`.
    public func connect(_ descriptor: Int32) -> Int32 {
        withGenericAddress { Glibc.connect(descriptor, $0, $1) }
    }

    private func withGenericAddress<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }

    /// The local address `descriptor` is bound to, as "HOST:PORT" (getsockname(2), numeric),
    /// nil for a socket with no internet address.
    public static func boundAddress(of descriptor: Int32) -> String? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard named == 0, Int32(storage.ss_family) == AF_INET || Int32(storage.ss_family) == AF_INET6 else {
            return nil
        }
        let port = Self.port(in: &storage)
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let found = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
            }
        }
        guard found == 0 else { return nil }
        let text = host.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return "\(text):\(port)"
    }

    /// The local port `descriptor` is bound to (getsockname(2)), nil for a socket with no port.
    public static func boundPort(of descriptor: Int32) -> UInt16? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard named == 0, Int32(storage.ss_family) == AF_INET || Int32(storage.ss_family) == AF_INET6 else {
            return nil
        }
        return port(in: &storage)
    }

    /// The port of an AF_INET or AF_INET6 address: sin_port and sin6_port sit at the same
    /// offset, right after the family.
    private static func port(in storage: inout sockaddr_storage) -> UInt16 {
        withUnsafeBytes(of: &storage) { raw in UInt16(bigEndian: raw.load(fromByteOffset: 2, as: UInt16.self)) }
    }
}
