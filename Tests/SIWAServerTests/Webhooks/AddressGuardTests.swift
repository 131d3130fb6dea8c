import Foundation
import Glibc
import Testing

@testable import SIWAHTTPS

/// The open-socket check when a name has several addresses: a refused one is skipped, and
/// when another is reached the request goes there and its answer is the outcome (not a
/// refusal, which had the deliverer post the same event again at every retry).
@Suite(.serialized) struct AddressGuardTests {
    /// One HTTP server on [::1]: answers each request 204 and counts them.
    final class IPv6Server: @unchecked Sendable {
        let descriptor: Int32
        let port: Int
        private let lock = NSLock()
        private var requests: [String] = []
        private var stopped = false

        init() throws {
            let listener = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_addr = in6addr_loopback
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
            guard bound == 0, listen(listener, 8) == 0 else {
                close(listener)
                throw POSIXError(.EADDRNOTAVAIL)
            }
            var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
            }
            descriptor = listener
            port = Int(UInt16(bigEndian: address.sin6_port))
            Thread { [self] in serve() }.start()
        }

        var received: [String] { lock.withLock { requests } }

        func stop() { lock.withLock { stopped = true } }

        /// Accepts for at most 10 s, until stopped; the thread closes the listener (not
        /// `stop`, so that its descriptor is never reused under a pending accept).
        private func serve() {
            defer { close(descriptor) }
            let end = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < end, !lock.withLock({ stopped }) {
                var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 100) > 0 else { continue }
                let client = accept(descriptor, nil, nil)
                guard client >= 0 else { continue }
                var timeout = timeval(tv_sec: 2, tv_usec: 0)
                setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                var request: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !String(decoding: request, as: UTF8.self).contains("{}") {
                    let count = recv(client, &buffer, buffer.count, 0)
                    guard count > 0 else { break }
                    request += buffer[0..<count]
                }
                lock.withLock { requests.append(String(decoding: request, as: UTF8.self)) }
                let answer = Array("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
                _ = send(client, answer, answer.count, Int32(MSG_NOSIGNAL))
                close(client)
            }
        }
    }

    @Test("a name with a refused address and an allowed one: posted to the allowed one, its answer returned")
    func refusedAddressSkipped() throws {
        let server = try IPv6Server()
        defer { server.stop() }
        // libcurl resolves localhost itself to 127.0.0.1 and ::1 and tries 127.0.0.1 first:
        // here IPv4 is the refused address, ::1 the one reached.
        let addressGuard = AddressGuard(allowPrivate: false) { family, _ in family == AF_INET ? "127.0.0.1" : nil }
        let response = try HTTPSFetcher(timeoutSeconds: 5).postJSON(
            "http://localhost:\(server.port)/hook", body: "{}", headers: [], userAgent: "test",
            connectTimeoutSeconds: 2, addressGuard: addressGuard)
        #expect(response.status == 204)
        #expect(addressGuard.refusedAddress == "127.0.0.1")
        #expect(server.received.count == 1)
        #expect(server.received.first?.hasPrefix("POST /hook ") == true)
    }

    @Test("every address refused: address_refused, nothing sent")
    func everyAddressRefused() throws {
        let server = try IPv6Server()
        defer { server.stop() }
        let refusal = #expect(throws: HTTPSFetchError.self) {
            _ = try HTTPSFetcher(timeoutSeconds: 5).postJSON(
                "http://localhost:\(server.port)/hook", body: "{}", headers: [], userAgent: "test",
                connectTimeoutSeconds: 2, addressGuard: AddressGuard(allowPrivate: false) { _, _ in "special" })
        }
        #expect(refusal?.code == .addressRefused)
        #expect(server.received.isEmpty)
    }
}
