import Foundation
import Glibc
import SIWASupport
import SIWATestSupport
import Testing

@testable import SIWAWebhooks

/// The deliverer's `/metrics` listener in process, on a real loopback socket: one deadline per
/// request however slowly its bytes come, and no slow or silent peer delays a scrape.
@Suite struct WebhookMetricsListenerTests {
    /// A listener running on its own thread until `stop()`.
    final class RunningListener: @unchecked Sendable {
        let listener: WebhookMetricsListener
        let port: Int
        let returned = Latch()

        init(requestDeadline: Duration) throws {
            port = try LoopbackPort.free()
            listener = WebhookMetricsListener(
                host: "127.0.0.1", port: port, metrics: WebhookMetrics(destinations: ["billing"]),
                requestDeadline: requestDeadline)
            try listener.start()
            let listener = listener
            let returned = returned
            Thread {
                listener.run()
                returned.open()
            }.start()
        }

        func stop() {
            listener.requestStop()
            _ = waitUntil(timeout: 5) { returned.hasOpened }
        }
    }

    /// Sends `text` and reads the whole answer (until the listener closes), or what came before
    /// the receive timeout.
    static func exchange(_ descriptor: Int32, _ text: String) -> String {
        _ = Array(text.utf8).withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        for _ in 0..<100 {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            answer += buffer[0..<count]
        }
        return String(decoding: answer, as: UTF8.self)
    }

    /// A scrape with a 3 s receive timeout: its answer, and how long it took. The tests that
    /// ask for a scrape "at once" bound it at `promptScrape`, well under the 5 s deadline of
    /// the peer that must not delay it, and well over a loaded machine's scheduling delays.
    static func scrape(port: Int) throws -> (answer: String, seconds: Double) {
        let started = ContinuousClock.now
        let descriptor = try #require(connectToLoopback(port: port, receiveTimeoutMicroseconds: 3_000_000))
        defer { close(descriptor) }
        let answer = exchange(descriptor, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        return (answer, (ContinuousClock.now - started).inSeconds)
    }

    /// A scrape answered sooner than this was not held up by a peer with a 5 s deadline.
    static let promptScrape = 2.5

    /// Whether the listener has closed `descriptor` (end of file or a reset, not a timeout).
    static func closedByListener(_ descriptor: Int32) -> Bool {
        var byte: UInt8 = 0
        let count = recv(descriptor, &byte, 1, 0)
        return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }

    @Test(
        "a peer sending a byte every 100 ms is closed at its 5 s deadline, unanswered; a scrape meanwhile is answered at once"
    )
    func tricklingPeer() throws {
        let running = try RunningListener(requestDeadline: .seconds(5))
        defer { running.stop() }
        let trickler = try #require(connectToLoopback(port: running.port, receiveTimeoutMicroseconds: 12_000_000))
        defer { close(trickler) }
        let connected = ContinuousClock.now
        _ = Array("GET /metr".utf8).withUnsafeBytes { send(trickler, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        let stopTrickling = Latch()
        Thread {
            // A byte every 100 ms for at most 11 s: well inside any per-read timeout.
            for _ in 0..<110 where !stopTrickling.hasOpened {
                Thread.sleep(forTimeInterval: 0.1)
                var byte = UInt8(ascii: "i")
                guard send(trickler, &byte, 1, Int32(MSG_NOSIGNAL)) == 1 else { return }
            }
        }.start()
        defer { stopTrickling.open() }

        let scrape = try Self.scrape(port: running.port)
        #expect(scrape.answer.hasPrefix("HTTP/1.0 200 OK\r\n"), "\(scrape.answer)")
        #expect(scrape.answer.contains("siwa_webhook_deliverer_up 1"))
        #expect(scrape.seconds < Self.promptScrape, "the scrape took \(scrape.seconds) s")

        #expect(Self.closedByListener(trickler))
        let heldFor = (ContinuousClock.now - connected).inSeconds
        #expect(heldFor >= 4.9 && heldFor < 8.0, "closed after \(heldFor) s")
    }

    @Test("more silent peers than the listener's slots: the oldest are dropped, a scrape is answered at once")
    func silentPeers() throws {
        // A 30 s deadline: a silent peer closed within this test was dropped for room, never
        // at its deadline.
        let running = try RunningListener(requestDeadline: .seconds(30))
        defer { running.stop() }
        var silent: [Int32] = []
        defer { for descriptor in silent { close(descriptor) } }
        for _ in 0..<(WebhookMetricsListener.maximumConnections + 8) {
            silent.append(try #require(connectToLoopback(port: running.port, receiveTimeoutMicroseconds: 3_000_000)))
        }
        let scrape = try Self.scrape(port: running.port)
        #expect(scrape.answer.hasPrefix("HTTP/1.0 200 OK\r\n"), "\(scrape.answer)")
        #expect(scrape.seconds < Self.promptScrape, "the scrape took \(scrape.seconds) s")
        // The first one opened had its slot taken, long before its own deadline.
        #expect(Self.closedByListener(silent[0]))
    }

    @Test("a request with long headers: the answer, then an orderly close (no reset that could discard it)")
    func longHeaders() throws {
        let running = try RunningListener(requestDeadline: .seconds(2))
        defer { running.stop() }
        for _ in 0..<5 {
            let descriptor = try #require(connectToLoopback(port: running.port, receiveTimeoutMicroseconds: 3_000_000))
            defer { close(descriptor) }
            let request =
                "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + String(repeating: "a", count: 12_000)
                + "\r\n\r\n"
            _ = Array(request.utf8).withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var answer: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            var last = 0
            var lastError: Int32 = 0
            for _ in 0..<100 {
                last = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                lastError = errno
                guard last > 0 else { break }
                answer += buffer[0..<last]
            }
            #expect(String(decoding: answer, as: UTF8.self).contains("siwa_webhook_deliverer_up 1"))
            #expect(last == 0, "the listener's close: \(last) (errno \(lastError))")
        }
    }

    @Test("a request line over 4 KiB is dropped unanswered; another path is 404")
    func refusals() throws {
        let running = try RunningListener(requestDeadline: .seconds(2))
        defer { running.stop() }
        let long = try #require(connectToLoopback(port: running.port, receiveTimeoutMicroseconds: 3_000_000))
        defer { close(long) }
        #expect(Self.exchange(long, "GET /" + String(repeating: "a", count: 5000)) == "")
        let other = try #require(connectToLoopback(port: running.port, receiveTimeoutMicroseconds: 3_000_000))
        defer { close(other) }
        #expect(Self.exchange(other, "GET /debug HTTP/1.0\r\n\r\n").hasPrefix("HTTP/1.0 404 Not Found\r\n"))
    }
}
