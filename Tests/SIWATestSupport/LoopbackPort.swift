import Foundation
import Glibc
import Synchronization

/// Free TCP ports on 127.0.0.1 for the servers the tests start (Redis, Sentinels, nginx,
/// stunnel). Never above `highest`: a Redis cluster node with its bus at the default listens
/// on its port + 10000, so any port handed out leaves room for that (the tests' own clusters
/// draw their bus ports too, `freeWithBusPorts`).
public enum LoopbackPort {
    public static let highest = 55_535

    public struct Unavailable: Error, CustomStringConvertible {
        public let description: String
    }

    /// The lowest port `free()` hands out.
    public static let lowest = 20_000

    /// A port free right now, drawn at random from this process's share (`slice`) of
    /// `lowest` up to `drawEnd` (below the kernel's ephemeral range,
    /// `net.ipv4.ip_local_port_range`, 32768 and up by default), and not handed out by this
    /// process in the last `reuseAfter`. Not a port the kernel picks for a bind to port 0: that comes
    /// from the ephemeral range, where every outgoing connection on the machine takes its
    /// source port, so once released it could be taken before the server bound it, which
    /// happened ("Address already in use") with scripts/test's several test processes side
    /// by side. Free is only "free now": until the server binds it, the same port could be
    /// drawn again, by this process (a sentinel group draws six before starting any, and
    /// two tests run at once) or by another test process; hence the memory, and the slices.
    /// A machine whose ephemeral range starts too low gets the kernel's picks, as before.
    public static func free() throws -> Int {
        let (start, end) = slice
        if end - start >= 1000 {
            for _ in 0..<2000 {
                let port = Int.random(in: start..<end)
                if isFree(port), handOut(port) { return port }
            }
        } else {
            for _ in 0..<200 {
                guard let port = kernelChosenPort() else { break }
                if port <= highest { return port }
            }
        }
        throw Unavailable(description: "no free loopback port at or below \(highest)")
    }

    /// How long a port handed out is not handed out again by this process.
    public static let reuseAfter: Duration = .seconds(60)

    /// This process's ports: all of `lowest` up to `drawEnd`, or with
    /// `SIWA_TEST_PORT_SLICE=k/n` (scripts/test gives each of its test processes its own
    /// k) the k-th of n equal parts of it, so two test processes never draw the same port.
    public static let slice: (start: Int, end: Int) = {
        let end = drawEnd
        guard let text = ProcessInfo.processInfo.environment["SIWA_TEST_PORT_SLICE"] else { return (lowest, end) }
        let parts = text.split(separator: "/").compactMap { Int($0) }
        guard parts.count == 2, parts[1] > 0, (0..<parts[1]).contains(parts[0]) else {
            fatalError("SIWA_TEST_PORT_SLICE is k/n with 0 <= k < n, not \(text)")
        }
        let width = (end - lowest) / parts[1]
        return (lowest + parts[0] * width, lowest + (parts[0] + 1) * width)
    }()

    /// Where `free()` stops: below the ephemeral range, and below `lowest + 10000` (so a
    /// server started with a cluster bus at its default, the port + 10000, never meets a
    /// port any test process draws; the tests' clusters draw theirs, `freeWithBusPorts`).
    public static let drawEnd = min(ephemeralRangeStart, lowest + 10_000, highest + 1)

    private static let handedOut = Mutex<[Int: ContinuousClock.Instant]>([:])

    /// Records `port` as handed out now; false when it was, within `reuseAfter`.
    private static func handOut(_ port: Int) -> Bool {
        let now = ContinuousClock.now
        return handedOut.withLock { handed in
            if let at = handed[port], now - at < reuseAfter { return false }
            handed[port] = now
            return true
        }
    }

    /// The first port of the kernel's ephemeral range (32768 when it cannot be read).
    public static let ephemeralRangeStart: Int = {
        let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
        return text?.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32_768
    }()

    /// A cluster node's two ports: clients', and its cluster bus's (`--cluster-port`).
    public struct ClusterNodePorts: Sendable, Equatable {
        public let port: Int
        public let busPort: Int
    }

    /// `count` cluster nodes' ports, each drawn by `free()`. The bus port is drawn too, and
    /// given to the node with `--cluster-port`, not left at its default (the port + 10000):
    /// that default lands in the ephemeral range, where any outgoing connection on the
    /// machine could take it (or leave it in TIME_WAIT) between the draw and the bind, or
    /// while a killed node is down before it is started again on the same ports.
    public static func freeWithBusPorts(_ count: Int) throws -> [ClusterNodePorts] {
        try (0..<count).map { _ in ClusterNodePorts(port: try free(), busPort: try free()) }
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
