import Foundation
import Glibc
import SIWAFastCGI
import SIWAFastCGIClient
import SIWATestKit
import Testing

/// Peers that never read their answers: a worker's write must never wait for them.
@Suite("FastCGI: a peer that never reads its answers holds no worker")
struct FastCGIUnreadAnswerTests {
    typealias Kit = FastCGITestKit
    typealias Peer = FastCGIHostilePeerTests.Peer

    /// One whole kept request (FCGI_KEEP_CONN) for `uri`, its STDIN ended.
    static func keptRequest(_ uri: String) -> [UInt8] {
        var bytes = FastCGIHostilePeerTests.requestHead(FastCGIClient.params(method: "GET", uri: uri), keep: true)
        FastCGIClient.appendRecord(&bytes, type: 5, requestID: 1, content: [UInt8]())
        return bytes
    }

    @Test(
        "serve: workers+1 kept connections send request after request and never read an answer: /healthz and a signed notification still answered in milliseconds"
    )
    func unreadAnswersHoldNoWorker() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let socketPath = stack.socketPath
        let stop = Kit.LockedBox(false)
        defer { stop.withValue { $0 = true } }
        let request = Self.keptRequest("/healthz/live")
        // 3 workers: 4 peers, each sending kept requests and never reading.
        let peers = (0..<4).map { _ in
            Kit.BackgroundCall { () -> Int in
                var sent = 0
                let end = ContinuousClock.now.advanced(by: .seconds(8))
                while ContinuousClock.now < end && !stop.current {
                    guard let peer = try? Peer(socketPath) else { usleep(10_000); continue }
                    var value = timeval(tv_sec: 0, tv_usec: 200_000)
                    setsockopt(peer.fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
                    for _ in 0..<5000 where ContinuousClock.now < end && !stop.current {
                        var before: Int32 = 0
                        _ = ioctl(peer.fd, UInt(FIONREAD), &before)
                        guard peer.write(request) else { break }
                        sent += 1
                        // The answer arrives (left unread) before the next request is sent,
                        // as nginx would send it on a kept connection.
                        for _ in 0..<1000 {
                            var queued: Int32 = 0
                            _ = ioctl(peer.fd, UInt(FIONREAD), &queued)
                            if queued > before { break }
                            usleep(500)
                        }
                    }
                }
                return sent
            }
        }
        usleep(2_000_000)
        var latencies: [Double] = []
        var statuses: [Int] = []
        for index in 0..<4 {
            let body = try stack.body(type: "consent-revoked", sub: "000034.u.\(index)")
            var status = -1
            latencies.append(
                Kit.measure {
                    status =
                        (try? FastCGIClient(.unixSocket(socketPath), timeout: .seconds(60)).send(
                            params: FastCGIClient.params(
                                method: "POST", uri: "/apple/notifications", body: body,
                                contentType: "application/json"),
                            body: body))?.status ?? -1
                })
            statuses.append(status)
            latencies.append(
                Kit.measure {
                    status =
                        (try? FastCGIClient(.unixSocket(socketPath), timeout: .seconds(60)).send(
                            params: FastCGIClient.params(method: "GET", uri: "/healthz")))?.status ?? -1
                })
            statuses.append(status)
        }
        stop.withValue { $0 = true }
        let sent = peers.compactMap { $0.wait(seconds: 60) }.reduce(0, +)
        #expect(statuses == Array(repeating: 200, count: 8))
        // Milliseconds as a rule; before, every worker waited on a write for the 30 s timeout.
        #expect(latencies.allSatisfy { $0 < 2 }, "latencies \(latencies)")
        for index in 0..<4 {
            #expect(try stack.userHash(sub: "000034.u.\(index)")["last_event_type"] == "consent-revoked")
        }
        // Each connection's second request was refused, counted under its reason.
        let refused =
            ((try? stack.request("GET", "/metrics"))?.bodyText ?? "").split(separator: "\n")
            .first { $0.hasPrefix(#"siwa_fastcgi_refused_total{reason="answer_unread"}"#) }
            .flatMap { $0.split(separator: " ").last.flatMap { Int($0) } } ?? 0
        #expect(refused > 0 && refused < sent, "\(refused) refused of \(sent) sent")
        // A kept connection whose peer reads each answer, as nginx does, is served on and on.
        let connection = try FastCGIClient(.unixSocket(socketPath)).connect()
        defer { connection.close() }
        for _ in 0..<20 {
            let answer = try connection.send(
                params: FastCGIClient.params(method: "GET", uri: "/healthz/live"), keepConnection: true)
            #expect(answer.status == 200)
        }
    }
}
