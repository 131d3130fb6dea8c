import Foundation
import Glibc
import SIWAFastCGIClient
import SIWATestKit
import Testing

@testable import SIWAFastCGI

/// A request in thousands of tiny records: every look at its connection walked them all.
@Suite("FastCGI: a request in more records than nginx ever sends is refused")
struct FastCGIRecordLimitTests {
    typealias Kit = FastCGITestKit
    typealias Peer = FastCGIHostilePeerTests.Peer

    static func record(_ type: UInt8, _ content: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        FastCGIClient.appendRecord(&bytes, type: type, requestID: 1, content: content)
        return bytes
    }

    /// BEGIN_REQUEST, then `count` PARAMS records of one byte each (the parameters not ended).
    static func oneBytePerRecord(_ count: Int) -> [UInt8] {
        var bytes = Array(FastCGIHostilePeerTests.requestHead([]).prefix(16))
        let one = record(4, [0x41])
        for _ in 0..<count { bytes += one }
        return bytes
    }

    @Test(
        "more than recordLimit records is refused; a request of nginx's shape, and one of recordLimit records, are not")
    func recordLimit() {
        let limit = FastCGIAcceptor.recordLimit
        // The BEGIN_REQUEST is one of them.
        #expect(FastCGIAcceptor.inspect(Self.oneBytePerRecord(limit - 1)[...]).parameters == nil)
        #expect(FastCGIAcceptor.inspect(Self.oneBytePerRecord(limit - 1)[...]).state == .partial)
        let over = FastCGIAcceptor.inspect(Self.oneBytePerRecord(limit)[...])
        #expect(over.parameters.map { if case .failure(.tooManyRecords) = $0 { true } else { false } } == true)
        // The parameters in records of a few bytes, a 128 KiB body in 32 KiB records: taken.
        let pairs = FastCGIParameterReadingTests.stream(
            FastCGIHostilePeerTests.postParams(declaring: 128 * 1024))
        var request = Array(FastCGIHostilePeerTests.requestHead([]).prefix(16))
        var offset = 0
        while offset < pairs.count {
            request += Self.record(4, Array(pairs[offset..<min(pairs.count, offset + 3)]))
            offset += 3
        }
        request += Self.record(4, [])
        for _ in 0..<4 { request += Self.record(5, [UInt8](repeating: 0x61, count: 32 * 1024)) }
        request += Self.record(5, [])
        let inspection = FastCGIAcceptor.inspect(request[...])
        #expect(inspection.state == .complete)
        #expect((try? inspection.parameters?.get())?.contentLength == 128 * 1024)
    }

    @Test(
        "serve: 400 peers each sending 12,000 one-byte PARAMS records and trickling more: refused, /healthz and a signed notification answered in milliseconds"
    )
    func tinyRecordsHoldNoAcceptor() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let head = Self.oneBytePerRecord(12_000)
        var peers: [Peer] = []
        // A peer whose 12,000 records did not all go out within the send timeout (a loaded
        // machine) is refused all the same once past the limit: counted apart.
        var partlyWritten: [Peer] = []
        for _ in 0..<400 {
            guard let peer = try? Peer(stack.socketPath) else { continue }
            var value = timeval(tv_sec: 1, tv_usec: 0)
            setsockopt(peer.fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
            if peer.write(head) { peers.append(peer) } else { partlyWritten.append(peer) }
        }
        let stop = Kit.LockedBox(false)
        let connected = peers
        let trickle = Kit.BackgroundCall { () -> Void in
            let one = Self.record(4, [0x41])
            let end = ContinuousClock.now.advanced(by: .seconds(10))
            while ContinuousClock.now < end && !stop.current {
                for peer in connected { peer.write(one) }
                usleep(15_000)
            }
        }
        defer {
            stop.withValue { $0 = true }
            _ = trickle.wait(seconds: 30)
        }
        var latencies: [Double] = []
        var statuses: [Int] = []
        for index in 0..<6 {
            let body = try stack.body(type: "consent-revoked", sub: "000034.r.\(index)")
            var status = -1
            latencies.append(
                Kit.measure {
                    status =
                        (try? FastCGIClient(.unixSocket(stack.socketPath), timeout: .seconds(30)).send(
                            params: FastCGIClient.params(
                                method: "POST", uri: "/apple/notifications", body: body,
                                contentType: "application/json"),
                            body: body))?.status ?? -1
                })
            statuses.append(status)
            latencies.append(
                Kit.measure {
                    status =
                        (try? FastCGIClient(.unixSocket(stack.socketPath), timeout: .seconds(30)).send(
                            params: FastCGIClient.params(method: "GET", uri: "/healthz")))?.status ?? -1
                })
            statuses.append(status)
            usleep(300_000)
        }
        #expect(statuses == Array(repeating: 200, count: 12))
        // Milliseconds as a rule; before, every look walked each peer's 12,000 records
        // again and /healthz waited seconds, or past the client's timeout.
        #expect(latencies.allSatisfy { $0 < 2 }, "latencies \(latencies)")
        let refused =
            ((try? stack.request("GET", "/metrics"))?.bodyText ?? "").split(separator: "\n")
            .first { $0.hasPrefix(#"siwa_fastcgi_refused_total{reason="too_many_records"}"#) }
            .flatMap { $0.split(separator: " ").last.flatMap { Int($0) } } ?? 0
        // Every peer that sent all its records is refused; one cut short may be too.
        #expect(
            (peers.count...(peers.count + partlyWritten.count)).contains(refused),
            "\(refused) refused of \(peers.count) (and \(partlyWritten.count) cut short)")
    }
}
