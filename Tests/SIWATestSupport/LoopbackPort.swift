import Foundation
import Glibc

/// Free TCP ports on 127.0.0.1 for the servers the tests start (Redis, Sentinels, nginx,
/// stunnel). Never above `highest`: a Redis cluster node listens on its port + 10000 for
/// its cluster bus, so any port the tests hand out must leave room for that.
public enum LoopbackPort {
    public static let highest = 55_535

    public struct Unavailable: Error, CustomStringConvertible {
        public let description: String
    }

    /// The lowest port `free()` hands out.
    public static let lowest = 20_000

    /// A port free right now, drawn at random from `lowest` up to below the kernel's
    /// ephemeral range (`net.ipv4.ip_local_port_range`, 32768 and up by default), at most
    /// `highest`. Not a port the kernel picks for a bind to port 0: that comes from the
    /// ephemeral range, where every outgoing connection on the machine takes its source
    /// port, so once released it could be taken before the server bound it, which happened
    /// ("Address already in use") with scripts/test's several test processes side by side.
    /// A machine whose ephemeral range starts too low gets the kernel's picks, as before.
    public static func free() throws -> Int {
        let end = min(ephemeralRangeStart, highest + 1)
        if end - lowest >= 1000 {
            for _ in 0..<2000 {
                let port = Int.random(in: lowest..<end)
                if isFree(port) { return port }
            }
        } else {
            for _ in 0..<200 {
                guard let port = kernelChosenPort() else { break }
                if port <= highest { return port }
            }
        }
        throw Unavailable(description: "no free loopback port at or below \(highest)")
    }

    /// The first port of the kernel's ephemeral range (32768 when it cannot be read).
    public static let ephemeralRangeStart: Int = {
        let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
        return text?.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32_768
    }()

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
