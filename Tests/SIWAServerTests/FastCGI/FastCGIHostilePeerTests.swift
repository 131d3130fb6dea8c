import Foundation
import Glibc
import SIWAFastCGIClient
import SIWATestKit
import Testing

@testable import SIWAFastCGI

/// Local peers that try to stop the endpoint: idle kept connections, bodies trickled a byte
/// at a time, input trickled after an answer, records that are not a request. Each peer is
/// written here with raw FastCGI records over the socket; each test bounds the `/healthz`
/// latency such a peer can cause. The bounds are generous for a loaded machine: they tell
/// "a worker was free" (milliseconds) from "the peer held it" (as long as it trickles,
/// which here is longer than the bound).
@Suite("FastCGI: hostile local peers cannot stop the endpoint")
struct FastCGIHostilePeerTests {
    typealias Kit = FastCGITestKit

    /// A raw connection to the socket that the test drives byte by byte, from any thread.
    final class Peer: @unchecked Sendable {
        let fd: Int32

        init(_ path: String) throws {
            fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8) + [0]) }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            guard fd >= 0, connected == 0 else {
                close(fd)
                throw FastCGIClient.Failure(description: "connect: errno \(errno)")
            }
        }

        deinit { close(fd) }

        /// False once the server has closed the connection (EPIPE, ECONNRESET).
        @discardableResult
        func write(_ bytes: [UInt8]) -> Bool {
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes {
                    Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return false }
                offset += written
            }
            return true
        }

        /// Everything the server sends until it ends its side, waited for at most `seconds`;
        /// nil if it did not end its side by then.
        func readUntilEnd(seconds: Double) -> [UInt8]? {
            let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int(seconds * 1000)))
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while ContinuousClock.now < deadline {
                var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let left = ContinuousClock.now.duration(to: deadline) / .milliseconds(1)
                guard poll(&entry, 1, Int32(max(1, min(1000, left)))) > 0 else { continue }
                let got = chunk.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
                if got < 0 && errno == EINTR { continue }
                if got <= 0 { return bytes }
                bytes += chunk[0..<got]
            }
            return nil
        }

        /// Sends one byte every `interval` until a write fails or `stop` is set or
        /// `seconds` pass; returns the seconds until the first failed write (the server
        /// closed the connection), nil if every write went through.
        func trickle(every interval: Duration, for seconds: Double, stop: Kit.LockedBox<Bool>) -> Double? {
            let start = ContinuousClock.now
            let end = start.advanced(by: .milliseconds(Int(seconds * 1000)))
            while ContinuousClock.now < end && !stop.current {
                guard write([0x61]) else { return Self.seconds(start.duration(to: .now)) }
                let (whole, fraction) = interval.components
                usleep(UInt32(whole) * 1_000_000 + UInt32(fraction / 1_000_000_000_000))
            }
            return nil
        }

        static func seconds(_ duration: Duration) -> Double {
            Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        }
    }

    /// The records of a request's start: BEGIN_REQUEST (responder role), and the whole
    /// PARAMS stream with its empty end record.
    static func requestHead(_ params: [(String, String)], requestID: UInt16 = 1, keep: Bool = false) -> [UInt8] {
        var bytes: [UInt8] = []
        FastCGIClient.appendRecord(&bytes, type: 1, requestID: requestID, content: [0, 1, keep ? 1 : 0, 0, 0, 0, 0, 0])
        let encoded = params.reduce(into: [UInt8]()) { out, pair in
            FastCGIClient.appendLength(&out, pair.0.utf8.count)
            FastCGIClient.appendLength(&out, pair.1.utf8.count)
            out += Array(pair.0.utf8) + Array(pair.1.utf8)
        }
        FastCGIClient.appendStream(&bytes, type: 4, requestID: requestID, content: encoded)
        return bytes
    }

    /// STDIN records carrying `body`, without the empty record that would end it.
    static func bodyRecords(_ body: [UInt8], requestID: UInt16 = 1) -> [UInt8] {
        var bytes: [UInt8] = []
        var offset = 0
        while offset < body.count {
            let end = min(body.count, offset + 65_535)
            FastCGIClient.appendRecord(&bytes, type: 5, requestID: requestID, content: body[offset..<end])
            offset = end
        }
        return bytes
    }

    /// POST parameters declaring `length` body bytes.
    static func postParams(declaring length: Int) -> [(String, String)] {
        FastCGIClient.params(method: "POST", uri: "/apple/notifications", contentType: "application/json")
            .filter { $0.0 != "CONTENT_LENGTH" } + [("CONTENT_LENGTH", String(length))]
    }

    /// Seconds until `/healthz` on a fresh connection is answered (200), nil if it was not.
    static func healthLatency(_ path: String) -> Double? {
        var status = 0
        let elapsed = Kit.measure {
            status =
                (try? FastCGIClient(.unixSocket(path), timeout: .seconds(60)).send(
                    params: FastCGIClient.params(method: "GET", uri: "/healthz")))?.status ?? -1
        }
        return status == 200 ? elapsed : nil
    }

    static func server(
        _ directory: Kit.TemporaryDirectory, workers: Int, maximumBodyBytes: Int = 64 * 1024,
        ioTimeout: Duration = .seconds(30), watchLimit: Int? = nil,
        handler: @escaping FastCGIServer.Handler = FastCGIHostilePeerTests.echoBody
    ) throws -> (FastCGIServer, String) {
        let path = directory.path + "/hostile.sock"
        let server = try FastCGIServer(
            configuration: .init(
                address: .unixSocket(path: path), workerCount: workers, maximumBodyBytes: maximumBodyBytes,
                ioTimeout: ioTimeout),
            idlePollTimeout: FastCGIAcceptor.defaultIdlePollTimeout, watchLimit: watchLimit,
            handler: handler)
        try server.start()
        return (server, path)
    }

    /// 200 with the body's size; 413 over the limit; 400 for a body cut short.
    static let echoBody: FastCGIServer.Handler = { request in
        switch request.body {
        case .complete(let body): FastCGIResponse(status: 200, contentType: "text/plain", body: "\(body.count)")
        case .tooLarge: FastCGIResponse(status: 413, contentType: "text/plain", body: "too large")
        case .incomplete: FastCGIResponse(status: 400, contentType: "text/plain", body: "incomplete")
        }
    }

    // MARK: - what counts as a request

    @Test("a request is whole only with BEGIN_REQUEST, PARAMS and STDIN, each ended, all of one request id")
    func requestIsWholeOnlyWhenEveryPartIsThere() {
        func state(_ bytes: [UInt8]) -> FastCGIAcceptor.RequestState { FastCGIAcceptor.requestState(bytes[...]) }
        let head = Self.requestHead([("REQUEST_METHOD", "GET")])
        var stdinEnd: [UInt8] = []
        FastCGIClient.appendRecord(&stdinEnd, type: 5, requestID: 1, content: [UInt8]())
        #expect(state(head + stdinEnd) == .complete)
        #expect(state(head + Self.bodyRecords([1, 2, 3]) + stdinEnd) == .complete)
        #expect(state(head + Self.bodyRecords([1, 2, 3])) == .parametersComplete)
        #expect(state(head) == .parametersComplete)
        #expect(state(Array(head.prefix(16))) == .partial)
        #expect(state([1, 1, 0]) == .partial)
        // The lone empty PARAMS record that used to count as a whole request.
        #expect(state([1, 4, 0, 1, 0, 0, 0, 0]) == .garbage)
        // PARAMS or STDIN of another request id than the BEGIN_REQUEST's.
        #expect(state(Array(head.prefix(16)) + [1, 4, 0, 2, 0, 0, 0, 0]) == .garbage)
        var otherStdin: [UInt8] = []
        FastCGIClient.appendRecord(&otherStdin, type: 5, requestID: 2, content: [UInt8]())
        #expect(state(head + otherStdin) == .garbage)
        // STDIN before the parameters ended; a second BEGIN_REQUEST; another role; request id 0.
        #expect(state(Array(head.prefix(16)) + stdinEnd) == .garbage)
        #expect(state(Array(head.prefix(16)) + Array(head.prefix(16))) == .garbage)
        #expect(state([1, 1, 0, 1, 0, 8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0]) == .garbage)
        #expect(state([1, 1, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]) == .garbage)
        // A record type nginx never sends in a request (GET_VALUES), and a wrong version.
        #expect(state([1, 9, 0, 0, 0, 0, 0, 0]) == .garbage)
        #expect(state([2, 1, 0, 1, 0, 8, 0, 0]) == .garbage)
    }

    @Test("lone empty PARAMS records, then a trickle: each connection is closed at once, /healthz waits for nothing")
    func loneParamsRecordIsNeverARequest() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let handled = Kit.LockedBox(0)
        let (server, path) = try Self.server(directory, workers: 2) { request in
            handled.withValue { $0 += 1 }
            return Self.echoBody(request)
        }
        defer { server.stop(timeout: .seconds(10)) }
        let stop = Kit.LockedBox(false)
        defer { stop.withValue { $0 = true } }
        // Three peers for two workers; each keeps sending a byte every 300 ms for 25 s. A
        // worker given one of them (libfcgi lingering on it) is held as long as they trickle.
        let trickles = try (0..<3).map { _ in
            let peer = try Peer(path)
            #expect(peer.write([1, 4, 0, 1, 0, 0, 0, 0]))
            return Kit.BackgroundCall { peer.trickle(every: .milliseconds(300), for: 25, stop: stop) }
        }
        let latency = Self.healthLatency(path)
        #expect(latency != nil && latency! < 10, "healthz took \(String(describing: latency)) s")
        for trickle in trickles {
            let closedAfter = trickle.wait(seconds: 40) ?? nil
            #expect(closedAfter != nil && closedAfter! < 10, "closed after \(String(describing: closedAfter)) s")
        }
        #expect(handled.current == 1, "only /healthz reached the handler")
    }

    // MARK: - item: bodies trickled a byte at a time

    @Test("bodies trickled a byte at a time hold no worker: /healthz is answered at once")
    func tricklingBodiesHoldNoWorker() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let (server, path) = try Self.server(directory, workers: 2)
        defer { server.stop(timeout: .seconds(10)) }
        let stop = Kit.LockedBox(false)
        defer { stop.withValue { $0 = true } }
        // Three peers for two workers: parameters declaring 1,000 bytes, then the body one
        // byte every 300 ms for 25 s, longer than the bound below.
        let peers = try (0..<3).map { _ in try Peer(path) }
        let trickles = peers.map { peer in
            #expect(peer.write(Self.requestHead(Self.postParams(declaring: 1000))))
            return Kit.BackgroundCall { () -> Double? in
                var bytes: [UInt8] = []
                FastCGIClient.appendRecord(&bytes, type: 5, requestID: 1, content: [0x61])
                let end = ContinuousClock.now.advanced(by: .seconds(25))
                while ContinuousClock.now < end && !stop.current {
                    guard peer.write(bytes) else { return 0 }
                    usleep(300_000)
                }
                return nil
            }
        }
        let latency = Self.healthLatency(path)
        #expect(latency != nil && latency! < 10, "healthz took \(String(describing: latency)) s")
        stop.withValue { $0 = true }
        for trickle in trickles { _ = trickle.wait(seconds: 30) }
    }

    @Test("a body of 100,000 bytes within a 128 KiB limit, then trickled: no worker reads it, closed at the deadline")
    func largeTrickledBodyEndsAtTheDeadline() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let bodies = Kit.LockedBox<[FastCGIRequest.Body]>([])
        let (server, path) = try Self.server(
            directory, workers: 1, maximumBodyBytes: 128 * 1024, ioTimeout: .seconds(2)
        ) { request in
            if request.path == "/apple/notifications" { bodies.withValue { $0.append(request.body) } }
            return Self.echoBody(request)
        }
        defer { server.stop(timeout: .seconds(10)) }
        let stop = Kit.LockedBox(false)
        defer { stop.withValue { $0 = true } }
        // 100,000 bytes arrive at once (more than the 64 KiB a worker used to be handed a
        // body with), then one a second for 30 s: the request waits whole or not at all.
        let peer = try Peer(path)
        let first = [UInt8](repeating: 0x61, count: 100_000)
        #expect(peer.write(Self.requestHead(Self.postParams(declaring: 110_000)) + Self.bodyRecords(first)))
        let trickle = Kit.BackgroundCall { () -> Bool in
            var bytes: [UInt8] = []
            FastCGIClient.appendRecord(&bytes, type: 5, requestID: 1, content: [0x61])
            let end = ContinuousClock.now.advanced(by: .seconds(30))
            while ContinuousClock.now < end && !stop.current {
                guard peer.write(bytes) else { return true }
                usleep(1_000_000)
            }
            return false
        }
        // The one worker stays free meanwhile.
        let latency = Self.healthLatency(path)
        #expect(latency != nil && latency! < 2, "healthz took \(String(describing: latency)) s")
        var answer: [UInt8]?
        let elapsed = Kit.measure { answer = peer.readUntilEnd(seconds: 40) }
        #expect(answer == [], "closed unanswered at the deadline")
        // Deadline 2 s after the accept; the trickle alone would have lasted 30 s.
        #expect(elapsed < 15, "closed after \(elapsed) s")
        #expect(bodies.current == [], "no worker was handed it")
        #expect(trickle.wait(seconds: 30) == true, "the peer's next write failed: it was closed")
    }

    // MARK: - item: input trickled after an answer

    @Test("input trickled after a 413: the answer arrives, the close is bounded, no worker lingers")
    func closeAfterUnreadInputIsBounded() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let (server, path) = try Self.server(directory, workers: 2, maximumBodyBytes: 1024)
        defer { server.stop(timeout: .seconds(10)) }
        let stop = Kit.LockedBox(false)
        defer { stop.withValue { $0 = true } }
        // Three peers for two workers, each declaring 10 MB, sending 66,000 bytes at once
        // (handed on at once: the declared body is over the limit), then a byte every 300 ms for
        // 25 s. libfcgi's lingering close read on for as long as bytes kept coming.
        let peers = try (0..<3).map { _ in try Peer(path) }
        let trickles = peers.map { peer in
            let first = [UInt8](repeating: 0x61, count: 66_000)
            #expect(peer.write(Self.requestHead(Self.postParams(declaring: 10_000_000)) + Self.bodyRecords(first)))
            return Kit.BackgroundCall { () -> (answer: String, closedAfter: Double?) in
                let trickling = Kit.BackgroundCall { peer.trickle(every: .milliseconds(300), for: 25, stop: stop) }
                let answer = String(decoding: peer.readUntilEnd(seconds: 30) ?? [], as: UTF8.self)
                return (answer, trickling.wait(seconds: 40) ?? nil)
            }
        }
        let latency = Self.healthLatency(path)
        #expect(latency != nil && latency! < 10, "healthz took \(String(describing: latency)) s")
        for trickle in trickles {
            let result = trickle.wait(seconds: 60)
            #expect(result?.answer.contains("Status: 413") == true, "\(String(describing: result?.answer))")
            // Drained for at most 2 s (or 64 KiB), then closed; the trickle lasts 25 s.
            let closedAfter = result?.closedAfter ?? nil
            #expect(closedAfter != nil && closedAfter! < 12, "closed after \(String(describing: closedAfter)) s")
        }
    }

    // MARK: - item: idle kept connections

    @Test("150 idle kept connections, watch limit 100: new connections are still accepted, the oldest idle ones closed")
    func idleKeptConnectionsDoNotStopAccepting() throws {
        ServeBacklogTests.raiseDescriptorLimit()
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        // A request deadline far beyond the test, so that only the bound closes idle ones.
        let (server, path) = try Self.server(directory, workers: 2, ioTimeout: .seconds(300), watchLimit: 100)
        defer { server.stop(timeout: .seconds(10)) }
        var kept: [FastCGIClient.Connection] = []
        defer { kept.forEach { $0.close() } }
        for _ in 0..<150 {
            let connection = try FastCGIClient(.unixSocket(path), timeout: .seconds(20)).connect()
            let response = try connection.send(
                params: FastCGIClient.params(method: "GET", uri: "/healthz"), keepConnection: true)
            #expect(response.status == 200)
            kept.append(connection)
        }
        let latency = Self.healthLatency(path)
        #expect(latency != nil && latency! < 10, "healthz took \(String(describing: latency)) s")
        // The oldest was closed to make room; the newest still serves its next request.
        #expect((try? kept[0].readToEnd()) == [])
        let again = try kept[149].send(
            params: FastCGIClient.params(method: "GET", uri: "/healthz"), keepConnection: true)
        #expect(again.status == 200)
    }

    @Test("an idle kept connection is closed at its deadline")
    func idleKeptConnectionIsClosedAtItsDeadline() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let (server, path) = try Self.server(directory, workers: 1, ioTimeout: .seconds(1))
        defer { server.stop(timeout: .seconds(10)) }
        let connection = try FastCGIClient(.unixSocket(path), timeout: .seconds(30)).connect()
        defer { connection.close() }
        let response = try connection.send(
            params: FastCGIClient.params(method: "GET", uri: "/healthz"), keepConnection: true)
        #expect(response.status == 200)
        // Closed by the server after 1 s idle, well before the client's own 30 s timeout.
        var ending: [UInt8]?
        let elapsed = Kit.measure { ending = try? connection.readToEnd() }
        #expect(ending == [], "the server ends the connection")
        #expect(elapsed < 20, "closed after \(elapsed) s")
    }
}
