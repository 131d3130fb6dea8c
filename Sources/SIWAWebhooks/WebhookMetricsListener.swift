import Foundation
import Glibc
import SIWASupport

/// The deliverer's `GET /metrics`: plain HTTP/1.0 on one address (loopback by default), the
/// Prometheus text of `WebhookMetrics`; anything else is answered 404. One thread serves every
/// connection at once (non-blocking sockets and `poll`), so a slow peer never delays another
/// scrape: each request has one deadline (`requestDeadline`, from its accept to the last byte
/// of the answer) however it trickles its bytes, a request line longer than 4 KiB is dropped,
/// and past `maximumConnections` open at once the oldest is dropped for the newest. After the
/// answer our side is shut and what the peer still sends (long headers) is read and dropped
/// until it closes, so that the close is orderly, never a reset that could discard the answer.
public final class WebhookMetricsListener: Service, @unchecked Sendable {
    public struct ListenError: Error, CustomStringConvertible {
        public let description: String
    }

    public static let defaultRequestDeadline: Duration = .seconds(2)
    public static let maximumConnections = 32
    static let maximumRequestBytes = 4096

    public let name = "deliver-metrics"
    let host: String
    let port: Int
    let metrics: WebhookMetrics
    let requestDeadline: Duration
    private var socketDescriptor: Int32 = -1
    private let stopRequested = Latch()

    /// One accepted connection: the request read so far, then the answer being written.
    private struct Connection {
        let descriptor: Int32
        let deadline: ContinuousClock.Instant
        var request: [UInt8] = []
        var answer: [UInt8]?
        var sent = 0
        /// The answer is sent and our side shut: what the peer still sends is read and
        /// dropped until it closes, so that closing never resets the answer away.
        var draining = false
        var drained = 0
    }

    public init(host: String, port: Int, metrics: WebhookMetrics, requestDeadline: Duration = defaultRequestDeadline) {
        self.host = host == "localhost" ? "127.0.0.1" : host
        self.port = port
        self.metrics = metrics
        self.requestDeadline = requestDeadline
    }

    public func start() throws(ListenError) {
        let descriptor = socket(
            AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard descriptor >= 0 else { throw ListenError(description: "socket() failed") }
        var yes: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host, &address.sin_addr)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(descriptor, 128) == 0 else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            throw ListenError(description: "cannot listen on \(host):\(port): \(reason)")
        }
        socketDescriptor = descriptor
    }

    public func requestStop() { stopRequested.open() }

    public func run() {
        var connections: [Connection] = []
        defer {
            for connection in connections { close(connection.descriptor) }
            close(socketDescriptor)
        }
        while !stopRequested.hasOpened {
            var pollers = [pollfd(fd: socketDescriptor, events: Int16(POLLIN), revents: 0)]
            for connection in connections {
                let wanted = connection.answer == nil || connection.draining ? POLLIN : POLLOUT
                pollers.append(pollfd(fd: connection.descriptor, events: Int16(wanted), revents: 0))
            }
            // Wake for the nearest deadline, and at least every 200 ms to notice a stop.
            var waitMilliseconds: Int32 = 200
            if let nearest = connections.map(\.deadline).min() {
                let left = ContinuousClock.now.duration(to: nearest).wholeMilliseconds
                waitMilliseconds = Int32(max(0, min(Int64(waitMilliseconds), left + 1)))
            }
            guard poll(&pollers, nfds_t(pollers.count), waitMilliseconds) >= 0 else { continue }
            var open: [Connection] = []
            for (index, connection) in connections.enumerated() {
                let ready = pollers[index + 1].revents != 0
                if let kept = ready ? serve(connection) : connection {
                    open.append(kept)
                }
            }
            let now = ContinuousClock.now
            connections = []
            for connection in open {
                if now >= connection.deadline {
                    close(connection.descriptor)
                } else {
                    connections.append(connection)
                }
            }
            if Int32(pollers[0].revents) & POLLIN != 0 {
                acceptWaiting(into: &connections)
            }
        }
    }

    /// Takes every connection waiting; past `maximumConnections` the oldest are closed.
    private func acceptWaiting(into connections: inout [Connection]) {
        for _ in 0..<Self.maximumConnections {
            let client = accept(socketDescriptor, nil, nil)
            guard client >= 0 else { return }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
            connections.append(Connection(descriptor: client, deadline: .now + requestDeadline))
            if connections.count > Self.maximumConnections {
                close(connections.removeFirst().descriptor)
            }
        }
    }

    /// Reads what arrived or writes what the peer can take; nil once the connection is closed.
    private func serve(_ connection: Connection) -> Connection? {
        var connection = connection
        if connection.draining { return drain(connection) }
        if connection.answer == nil {
            var buffer = [UInt8](repeating: 0, count: 1024)
            let count = buffer.withUnsafeMutableBytes { recv(connection.descriptor, $0.baseAddress, $0.count, 0) }
            if count < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return connection }
            guard count > 0 else {
                close(connection.descriptor)
                return nil
            }
            connection.request += buffer[0..<count]
            guard connection.request.contains(UInt8(ascii: "\n")) else {
                guard connection.request.count < Self.maximumRequestBytes else {
                    close(connection.descriptor)
                    return nil
                }
                return connection
            }
            connection.answer = answer(to: connection.request)
        }
        guard let answer = connection.answer else { return connection }
        let count = answer[connection.sent...].withUnsafeBytes {
            send(connection.descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
        }
        if count < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return connection }
        guard count > 0 else {
            close(connection.descriptor)
            return nil
        }
        connection.sent += count
        guard connection.sent == answer.count else { return connection }
        // The rest of the request (headers past the first line) may be unread: closing now
        // would send a reset, which can discard the answer at the peer. Shut our side (FIN
        // after the answer) and read until the peer closes, within the same deadline.
        shutdown(connection.descriptor, Int32(SHUT_WR))
        connection.draining = true
        return drain(connection)
    }

    /// Reads and drops what the peer sends after its answer; nil once closed (the peer's end
    /// of file, an error, or more than `maximumRequestBytes` more).
    private func drain(_ connection: Connection) -> Connection? {
        var connection = connection
        var buffer = [UInt8](repeating: 0, count: 1024)
        while connection.drained <= Self.maximumRequestBytes * 4 {
            let count = buffer.withUnsafeMutableBytes { recv(connection.descriptor, $0.baseAddress, $0.count, 0) }
            if count < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return connection }
            guard count > 0 else { break }
            connection.drained += count
        }
        close(connection.descriptor)
        return nil
    }

    private func answer(to request: [UInt8]) -> [UInt8] {
        let line = String(
            decoding: request.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        let parts = line.split(separator: " ")
        let (status, body) =
            parts.count >= 2 && parts[0] == "GET" && (parts[1] == "/metrics" || parts[1].hasPrefix("/metrics?"))
            ? ("200 OK", metrics.render()) : ("404 Not Found", "not found\n")
        return Array(
            ("HTTP/1.0 \(status)\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: \(body.utf8.count)\r\n"
                + "Connection: close\r\n\r\n" + body).utf8)
    }
}
