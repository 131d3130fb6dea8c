import Foundation
import Glibc
import SIWASupport

/// The deliverer's `GET /metrics`: plain HTTP/1.0 on one address (loopback by default), one
/// short connection at a time, the Prometheus text of `WebhookMetrics`. Anything else is
/// answered 404; a request line longer than 4 KiB or slower than 2 s is dropped.
public final class WebhookMetricsListener: Service, @unchecked Sendable {
    public struct ListenError: Error, CustomStringConvertible {
        public let description: String
    }

    public let name = "deliver-metrics"
    let host: String
    let port: Int
    let metrics: WebhookMetrics
    private var socketDescriptor: Int32 = -1
    private let stopRequested = Latch()

    public init(host: String, port: Int, metrics: WebhookMetrics) {
        self.host = host == "localhost" ? "127.0.0.1" : host
        self.port = port
        self.metrics = metrics
    }

    public func start() throws(ListenError) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
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
        guard bound == 0, listen(descriptor, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            throw ListenError(description: "cannot listen on \(host):\(port): \(reason)")
        }
        socketDescriptor = descriptor
    }

    public func requestStop() { stopRequested.open() }

    public func run() {
        defer { close(socketDescriptor) }
        while !stopRequested.hasOpened {
            var poller = pollfd(fd: socketDescriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 200) > 0 else { continue }
            let client = accept(socketDescriptor, nil, nil)
            guard client >= 0 else { continue }
            answer(client)
            close(client)
        }
    }

    private func answer(_ client: Int32) {
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while request.count < 4096, !request.containsLineEnd {
            let count = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return }
            request += buffer[0..<count]
        }
        let line = String(
            decoding: request.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        let parts = line.split(separator: " ")
        let (status, body) =
            parts.count >= 2 && parts[0] == "GET" && (parts[1] == "/metrics" || parts[1].hasPrefix("/metrics?"))
            ? ("200 OK", metrics.render()) : ("404 Not Found", "not found\n")
        let bytes = Array(
            ("HTTP/1.0 \(status)\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: \(body.utf8.count)\r\n"
                + "Connection: close\r\n\r\n" + body).utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { return }
            sent += count
        }
    }
}

extension [UInt8] {
    fileprivate var containsLineEnd: Bool { contains(UInt8(ascii: "\n")) }
}
