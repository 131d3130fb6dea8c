import Glibc

/// Free TCP ports on 127.0.0.1 for the servers the tests start (Redis, Sentinels, nginx,
/// stunnel). Never above `highest`: a Redis cluster node listens on its port + 10000 for
/// its cluster bus, so any port the tests hand out must leave room for that.
public enum LoopbackPort {
    public static let highest = 55_535

    public struct Unavailable: Error, CustomStringConvertible {
        public let description: String
    }

    /// A port the kernel reports free (bound with port 0, then released), at most `highest`.
    public static func free() throws -> Int {
        for _ in 0..<200 {
            guard let port = kernelChosenPort() else { break }
            if port <= highest { return port }
        }
        throw Unavailable(description: "no free loopback port at or below \(highest)")
    }

    /// `count` distinct free ports whose cluster bus port (port + 10000) is free too.
    public static func freeWithBusPorts(_ count: Int) throws -> [Int] {
        var ports: [Int] = []
        for _ in 0..<2000 where ports.count < count {
            let port = Int.random(in: 20_000...45_000)
            guard !ports.contains(port), isFree(port), isFree(port + 10_000) else { continue }
            ports.append(port)
        }
        guard ports.count == count else { throw Unavailable(description: "no free loopback ports for a cluster") }
        return ports
    }

    /// Whether `port` on 127.0.0.1 can be bound right now.
    public static func isFree(_ port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = loopback(port: UInt16(port))
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    private static func kernelChosenPort() -> Int? {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var address = loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(descriptor, generic, length) == 0 && getsockname(descriptor, generic, &length) == 0
            }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : nil
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return address
    }
}
