import Foundation
import Glibc
import SIWAFastCGIClient
import SIWATestSupport
import Testing

@testable import SIWAFastCGI

/// The parameters are read once, by the acceptor, and the worker goes by that reading: a
/// peer of the socket can no longer make the acceptor judge one length ("over the limit,
/// answer at once") and the worker read another ("10 bytes, wait for them"), which held a
/// worker for the 30 s request deadline per connection. Parameters nginx never sends are
/// closed before any worker is involved, and a worker never waits for bytes that are not
/// in the socket, whatever the acceptor decided.
@Suite("FastCGI: one reading of the parameters, shared by the acceptor and the worker")
struct FastCGIParameterReadingTests {
    typealias Kit = FastCGITestKit
    typealias Peer = FastCGIHostilePeerTests.Peer
    typealias Hostile = FastCGIHostilePeerTests

    /// Name-value pairs as a PARAMS stream (one-byte lengths, four-byte past 127).
    static func stream(_ pairs: [(String, String)]) -> [UInt8] {
        pairs.reduce(into: [UInt8]()) { out, pair in
            FastCGIClient.appendLength(&out, pair.0.utf8.count)
            FastCGIClient.appendLength(&out, pair.1.utf8.count)
            out += Array(pair.0.utf8) + Array(pair.1.utf8)
        }
    }

    /// A BEGIN_REQUEST and a PARAMS stream holding `content` as it is, ended.
    static func head(rawParameters content: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        FastCGIClient.appendRecord(&bytes, type: 1, requestID: 1, content: [0, 1, 0, 0, 0, 0, 0, 0])
        FastCGIClient.appendStream(&bytes, type: 4, requestID: 1, content: content)
        return bytes
    }

    /// Every kind of parameters nginx never sends, as a peer of the socket sends them (with
    /// a POST to the notification path and no body), and what the acceptor calls each.
    /// The first two are the ones that held every worker: a length over the 64 KiB limit
    /// read by the acceptor, then `10` read by the worker.
    static let refusedVariants: [(name: String, head: [UInt8], refusal: FastCGIRefusal)] = {
        let overLimit = Hostile.postParams(declaring: 100_000)
        let small = Hostile.postParams(declaring: 10)
        var variants: [(String, [UInt8], FastCGIRefusal)] = [
            (
                "CONTENT_LENGTH twice, over the limit first",
                Hostile.requestHead(overLimit + [("CONTENT_LENGTH", "10")]),
                .duplicateParameter
            ),
            (
                "CONTENT_LENGTH twice, over the limit last",
                Hostile.requestHead(small + [("CONTENT_LENGTH", "100000")]),
                .duplicateParameter
            ),
            ("REQUEST_METHOD twice", Hostile.requestHead(small + [("REQUEST_METHOD", "GET")]), .duplicateParameter),
            (
                "a name CONTENT_LENGTH=10 and a NUL",
                Hostile.requestHead(overLimit + [("CONTENT_LENGTH=10\u{0}", "x")]),
                .invalidParameterName
            ),
            ("a name with =", Hostile.requestHead(overLimit + [("CONTENT_LENGTH=10", "")]), .invalidParameterName),
            ("a name with 0x01", Hostile.requestHead(small + [("X\u{1}", "1")]), .invalidParameterName),
            ("a name with a newline", Hostile.requestHead(small + [("HTTP_X\n", "1")]), .invalidParameterName),
            ("a name with DEL", Hostile.requestHead(small + [("X\u{7F}", "1")]), .invalidParameterName),
            ("a pair cut short", head(rawParameters: [14, 2] + Array("CONTENT_LENGTH".utf8)), .malformedParameters),
        ]
        for length in [
            "10 ", " 10", "+10", "-1", "0x10", "1e3", "1.0", "\u{661}\u{660}", String(repeating: "9", count: 19),
        ] {
            variants.append(
                (
                    "CONTENT_LENGTH \(length.debugDescription)",
                    Hostile.requestHead(Hostile.postParams(declaring: 0).dropLast() + [("CONTENT_LENGTH", length)]),
                    .invalidContentLength
                ))
        }
        return variants
    }()

    /// The PARAMS stream of a head built by `Hostile.requestHead` or `head(rawParameters:)`.
    static func parameterStream(of head: [UInt8]) -> [UInt8] {
        var stream: [UInt8] = []
        var offset = 16  // past the BEGIN_REQUEST record
        while offset + 8 <= head.count {
            let length = Int(head[offset + 4]) << 8 | Int(head[offset + 5])
            stream += head[(offset + 8)..<(offset + 8 + length)]
            offset += 8 + length + Int(head[offset + 6])
        }
        return stream
    }

    // MARK: - the reading itself

    @Test("each kind of parameters nginx never sends is refused by name", arguments: 0..<refusedVariants.count)
    func readingRefusesWhatNginxNeverSends(_ index: Int) {
        let variant = Self.refusedVariants[index]
        #expect(throws: variant.refusal, "\(variant.name)") {
            try FastCGIParameters(reading: Self.parameterStream(of: variant.head)[...])
        }
        // The acceptor's look at the whole request (its STDIN ended) reads the same refusal.
        var stdinEnd: [UInt8] = []
        FastCGIClient.appendRecord(&stdinEnd, type: 5, requestID: 1, content: [UInt8]())
        let inspection = FastCGIAcceptor.inspect((variant.head + stdinEnd)[...])
        #expect(inspection.state == .complete)
        guard case .failure(let refusal)? = inspection.parameters else {
            Issue.record("\(variant.name): read without a refusal")
            return
        }
        #expect(refusal == variant.refusal, "\(variant.name)")
    }

    @Test("what nginx sends is read: an empty length, leading zeros, four-byte lengths, a repeated header joined")
    func readingTakesWhatNginxSends() throws {
        let long = String(repeating: "v", count: 300)
        let parameters = try FastCGIParameters(
            reading: Self.stream([
                ("CONTENT_LENGTH", ""), ("HTTP_X_FOO", "a"), ("HTTP_COOKIE", "a=1"), ("HTTP_X_LONG", long),
                ("HTTP_X_FOO", "b"), ("HTTP_COOKIE", "b=2"), ("QUERY_STRING", "a\u{0}b"), ("", "nameless"),
            ])[...])
        #expect(parameters.contentLength == nil)
        #expect(parameters.value("CONTENT_LENGTH") == "")
        // nginx 1.22 sends a header line a client repeated as its own parameter; joined as
        // nginx 1.23 joins it.
        #expect(parameters.value("HTTP_X_FOO") == "a, b")
        #expect(parameters.value("HTTP_COOKIE") == "a=1; b=2")
        #expect(parameters.value("HTTP_X_LONG") == long)
        #expect(parameters.value("QUERY_STRING") == "a\u{0}b")
        #expect(parameters.value("") == "nameless")
        #expect(try FastCGIParameters(reading: Self.stream([("CONTENT_LENGTH", "0042")])[...]).contentLength == 42)
        // nginx passes a client's Content-Length as written, and takes any number of leading zeros.
        let zeros = String(repeating: "0", count: 30)
        #expect(
            try FastCGIParameters(reading: Self.stream([("CONTENT_LENGTH", zeros + "42")])[...]).contentLength == 42)
        #expect(try FastCGIParameters(reading: Self.stream([("CONTENT_LENGTH", zeros)])[...]).contentLength == 0)
        #expect(
            try FastCGIParameters(reading: Self.stream([("CONTENT_LENGTH", String(repeating: "9", count: 18))])[...])
                .contentLength == 999_999_999_999_999_999)
        #expect(try FastCGIParameters(reading: [][...]).dictionary == [:])
    }

    @Test("past 32 names (looked up by hash, not compared one by one) a repeat is still found, early or late")
    func repeatsFoundAmongManyNames() throws {
        let many = (0..<40).map { ("HTTP_X_\($0)", "\($0)") }
        #expect(throws: FastCGIRefusal.duplicateParameter) {
            try FastCGIParameters(reading: Self.stream([("NAME_3", "a")] + many + [("NAME_3", "b")])[...])
        }
        #expect(throws: FastCGIRefusal.duplicateParameter) {
            try FastCGIParameters(reading: Self.stream(many + [("NAME_35", "a"), ("NAME_35", "b")])[...])
        }
        let joined = try FastCGIParameters(
            reading: Self.stream(many + [("HTTP_X_3", "again"), ("HTTP_X_39", "again")])[...])
        #expect(joined.value("HTTP_X_3") == "3, again")
        #expect(joined.value("HTTP_X_39") == "39, again")
        #expect(joined.value("HTTP_X_20") == "20")
        #expect(joined.dictionary.count == 40)
    }

    // MARK: - on the socket

    /// A server of one worker whose handler counts what reaches it; refusals collected.
    static func server(
        _ directory: Kit.TemporaryDirectory, workers: Int = 1, refusals: Kit.LockedBox<[FastCGIRefusal]>,
        handled: Kit.LockedBox<[String]>
    ) throws -> (FastCGIServer, String) {
        let path = directory.path + "/reading.sock"
        let server = try FastCGIServer(
            configuration: .init(address: .unixSocket(path: path), workerCount: workers, ioTimeout: .seconds(30)),
            idlePollTimeout: FastCGIAcceptor.defaultIdlePollTimeout,
            onRefusal: { reason in refusals.withValue { $0.append(reason) } }
        ) { request in
            handled.withValue { $0.append(request.path) }
            return Hostile.echoBody(request)
        }
        try server.start()
        return (server, path)
    }

    @Test("each kind, no body sent: closed unanswered at once, refused by name, no worker involved")
    func eachVariantIsClosedBeforeAnyWorker() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let refusals = Kit.LockedBox<[FastCGIRefusal]>([])
        let handled = Kit.LockedBox<[String]>([])
        let (server, path) = try Self.server(directory, refusals: refusals, handled: handled)
        defer { server.stop(timeout: .seconds(10)) }
        for variant in Self.refusedVariants {
            let peer = try Peer(path)
            #expect(peer.write(variant.head))
            var answer: [UInt8]?
            let elapsed = Kit.measure { answer = peer.readUntilEnd(seconds: 10) }
            // Before: handed on as "413 at once", then its worker waited 30 s for 10 bytes.
            #expect(answer == [], "\(variant.name): closed unanswered")
            #expect(elapsed < 2, "\(variant.name): closed after \(elapsed) s")
        }
        #expect(refusals.current == Self.refusedVariants.map(\.refusal))
        #expect(handled.current == [], "no worker was handed one")
        let latency = Hostile.healthLatency(path)
        #expect(latency != nil && latency! < 2, "healthz took \(String(describing: latency)) s")
    }

    @Test("the handler is given the acceptor's reading, not libfcgi's: a repeated header joined, a NUL in a value kept")
    func workerGoesByTheAcceptorsReading() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let refusals = Kit.LockedBox<[FastCGIRefusal]>([])
        let handled = Kit.LockedBox<[String]>([])
        let path = directory.path + "/reading.sock"
        let server = try FastCGIServer(
            configuration: .init(address: .unixSocket(path: path), workerCount: 1),
            idlePollTimeout: FastCGIAcceptor.defaultIdlePollTimeout,
            onRefusal: { reason in refusals.withValue { $0.append(reason) } }
        ) { request in
            handled.withValue { $0.append(request.path) }
            let seen = [request.param("HTTP_X_FOO"), request.param("QUERY_STRING")].map { $0 ?? "-" }
            return FastCGIResponse(status: 200, contentType: "text/plain", body: seen.joined(separator: "|"))
        }
        try server.start()
        defer { server.stop(timeout: .seconds(10)) }
        // libfcgi's copies: the last HTTP_X_FOO ("b"), and the value cut at its NUL ("q=1").
        let response = try FastCGIClient(.unixSocket(path), timeout: .seconds(10)).send(
            params: FastCGIClient.params(
                method: "GET", uri: "/echo?q=1\u{0}r=2", extra: [("HTTP_X_FOO", "a"), ("HTTP_X_FOO", "b")]))
        #expect(response.status == 200)
        #expect(response.bodyText == "a, b|q=1\u{0}r=2")
        #expect(handled.current == ["/echo"])
        #expect(refusals.current == [])
    }

    @Test(
        "every kind from 8 peers at once, repeated for 3 s, against 2 workers: /healthz and genuine POSTs each answered in under 2 s"
    )
    func everyVariantAtRate() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let refusals = Kit.LockedBox<[FastCGIRefusal]>([])
        let handled = Kit.LockedBox<[String]>([])
        let (server, path) = try Self.server(directory, workers: 2, refusals: refusals, handled: handled)
        defer { server.stop(timeout: .seconds(10)) }
        let stop = Kit.LockedBox(false)
        defer { stop.withValue { $0 = true } }
        // Each peer sends every kind in turn, a new connection each, waiting for the close
        // (at most 100 rounds or 3 s): what it counts is what must have been refused.
        let peers = (0..<8).map { _ in
            Kit.BackgroundCall { () -> (sent: Int, unanswered: Int) in
                var sent = 0
                var unanswered = 0
                let end = ContinuousClock.now.advanced(by: .seconds(3))
                for _ in 0..<100 where ContinuousClock.now < end && !stop.current {
                    for variant in Self.refusedVariants {
                        guard let peer = try? Peer(path), peer.write(variant.head) else { continue }
                        sent += 1
                        if peer.readUntilEnd(seconds: 10) == [] { unanswered += 1 }
                    }
                }
                return (sent, unanswered)
            }
        }
        // Meanwhile, what Apple and the balancer send, every 100 ms: each answered as usual.
        let body = [UInt8](repeating: 0x61, count: 1500)
        var latencies: [Double] = []
        var statuses: [Int] = []
        for _ in 0..<12 {
            var status = -1
            latencies.append(
                Kit.measure {
                    status =
                        (try? FastCGIClient(.unixSocket(path), timeout: .seconds(30)).send(
                            params: FastCGIClient.params(method: "GET", uri: "/healthz")))?.status ?? -1
                })
            statuses.append(status)
            latencies.append(
                Kit.measure {
                    status =
                        (try? FastCGIClient(.unixSocket(path), timeout: .seconds(30)).send(
                            params: FastCGIClient.params(
                                method: "POST", uri: "/apple/notifications", body: body, contentType: "application/json"
                            ),
                            body: body))?.status ?? -1
                })
            statuses.append(status)
            usleep(100_000)
        }
        let results = peers.map { $0.wait(seconds: 60) }
        #expect(statuses == Array(repeating: 200, count: 24))
        // Milliseconds as a rule; the bound tells "a worker was free" from "held for 30 s"
        // on a loaded machine.
        #expect(latencies.allSatisfy { $0 < 2 }, "latencies \(latencies)")
        let sent = results.compactMap { $0?.sent }.reduce(0, +)
        #expect(results.allSatisfy { $0 != nil && $0!.sent == $0!.unanswered }, "every one closed unanswered")
        #expect(sent >= 8 * Self.refusedVariants.count, "each peer sent every kind at least once (\(sent))")
        #expect(waitUntil(timeout: 10) { refusals.current.count == sent }, "\(refusals.current.count) of \(sent)")
        #expect(Set(refusals.current) == Set(Self.refusedVariants.map(\.refusal)))
        #expect(handled.current.count == 24, "only the genuine requests reached a worker")
    }

    @Test(
        "serve: every kind from 6 peers for 3 s: /healthz and signed notifications answered as usual and stored; one line per reason, each counted"
    )
    func serveAtRate() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        guard let serve = stack.serve else { throw ServeProcess.StartFailure(description: "no serve") }
        let stop = Kit.LockedBox(false)
        defer { stop.withValue { $0 = true } }
        let socketPath = stack.socketPath
        let peers = (0..<6).map { _ in
            Kit.BackgroundCall { () -> Int in
                var sent = 0
                let end = ContinuousClock.now.advanced(by: .seconds(3))
                for _ in 0..<100 where ContinuousClock.now < end && !stop.current {
                    for variant in Self.refusedVariants {
                        guard let peer = try? Peer(socketPath), peer.write(variant.head) else { continue }
                        if peer.readUntilEnd(seconds: 10) == [] { sent += 1 }
                    }
                }
                return sent
            }
        }
        var latencies: [Double] = []
        var statuses: [Int] = []
        let subjects = (0..<10).map { "000034.f.\(1000 + $0)" }
        for subject in subjects {
            let body = try stack.body(type: "consent-revoked", sub: subject)
            var status = -1
            latencies.append(Kit.measure { status = (try? stack.post(body))?.status ?? -1 })
            statuses.append(status)
            // One /healthz timed; a 503 only for a PING past its bound is asked again untimed.
            var health: FastCGIClient.Response?
            latencies.append(Kit.measure { health = try? stack.request("GET", "/healthz") })
            if health?.jsonFields["redis_circuit"] == "ping_timeout" { health = try? stack.health() }
            statuses.append(health?.status ?? -1)
            usleep(200_000)
        }
        let refused = peers.compactMap { $0.wait(seconds: 60) }.reduce(0, +)
        #expect(statuses == Array(repeating: 200, count: 20))
        // Milliseconds as a rule; the bound tells "a worker was free" from "held for 30 s"
        // on a loaded machine.
        #expect(latencies.allSatisfy { $0 < 2 }, "latencies \(latencies)")
        for subject in subjects {
            #expect(try stack.userHash(sub: subject)["last_event_type"] == "consent-revoked", "\(subject)")
        }
        #expect(refused >= 6 * Self.refusedVariants.count, "each peer's every kind closed unanswered (\(refused))")
        // Each connection counted; the log has the first of each reason (summaries every 30 s).
        func counted() -> Int {
            let text = (try? stack.request("GET", "/metrics"))?.bodyText ?? ""
            return text.split(separator: "\n").filter { $0.hasPrefix("siwa_fastcgi_refused_total{") }
                .compactMap { $0.split(separator: " ").last.flatMap { Int($0) } }.reduce(0, +)
        }
        #expect(stack.waitUntil(timeout: 10) { counted() == refused }, "\(counted()) counted of \(refused)")
        let lines = serve.logLines(event: "fastcgi_request_refused")
        let reasons = Set(Self.refusedVariants.map(\.refusal.rawValue))
        #expect(lines.count == reasons.count, "\(lines)")
        for reason in reasons {
            #expect(lines.filter { $0.contains(#""reason":"\#(reason)""#) }.count == 1, "\(reason): \(lines)")
        }
    }

    // MARK: - the worker's own bound

    /// An acceptor and one worker over a listener no peer uses: connections are handed to
    /// the worker directly, as a mistaken acceptor would hand them.
    final class HandOnRig: @unchecked Sendable {
        let acceptor: FastCGIAcceptor
        let listener: FastCGIListener
        let stopPipe: (read: Int32, write: Int32)
        let bodies = Kit.LockedBox<[(FastCGIRequest.Body, Double)]>([])
        let finished: [Kit.BackgroundCall<Bool>]
        private let handedAt = Kit.LockedBox(ContinuousClock.now)

        init(_ directory: Kit.TemporaryDirectory) throws {
            try FastCGILibrary.initialize()
            listener = try FastCGIListener(address: .unixSocket(path: directory.path + "/rig.sock"), backlog: 8)
            stopPipe = try FastCGILibrary.makePipe()
            // The request deadline and each read's timeout are 30 s: only the read bound is short.
            let acceptor = try FastCGIAcceptor(
                listenFD: listener.fileDescriptor, stopFD: stopPipe.read, requestTimeout: .seconds(30), workerCount: 1,
                maximumBodyBytes: 64 * 1024)
            self.acceptor = acceptor
            let bodies = bodies
            let handedAt = handedAt
            let worker = try FastCGIWorker(acceptor: acceptor, maximumBodyBytes: 64 * 1024, ioTimeout: .seconds(30)) {
                request in
                let waited = Peer.seconds(handedAt.current.duration(to: .now))
                bodies.withValue { $0.append((request.body, waited)) }
                return Hostile.echoBody(request)
            }
            finished = [
                Kit.BackgroundCall {
                    acceptor.run()
                    return true
                },
                Kit.BackgroundCall {
                    worker.run()
                    return true
                },
            ]
        }

        /// Hands the worker one end of a new connection whose peer end is returned.
        func handOn(declaring length: Int) throws -> Int32 {
            var ends: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &ends) == 0 else {
                throw FastCGIClient.Failure(description: "socketpair: errno \(errno)")
            }
            // Non-blocking, as the acceptor's accept4 makes every connection it hands on.
            _ = fcntl(ends[0], F_SETFL, fcntl(ends[0], F_GETFL) | O_NONBLOCK)
            let head = Hostile.requestHead(Hostile.postParams(declaring: length))
            _ = head.withUnsafeBytes { Glibc.send(ends[1], $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            let parameters = try FastCGIParameters(reading: FastCGIParameterReadingTests.parameterStream(of: head)[...])
            handedAt.withValue { $0 = .now }
            acceptor.handOn([.init(fd: ends[0], parameters: parameters)])
            return ends[1]
        }

        func stop() {
            var byte: UInt8 = 1
            _ = write(stopPipe.write, &byte, 1)
            for call in finished { _ = call.wait(seconds: 20) }
            listener.closeAndRemove()
            close(stopPipe.read)
            close(stopPipe.write)
        }
    }

    @Test("a worker handed a request whose body is not there does not wait for it, silent or trickled")
    func workerNeverWaitsForAbsentBytes() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let rig = try HandOnRig(directory)
        defer { rig.stop() }
        // Declares 10 bytes and sends none: before, the worker waited for the request's 30 s.
        let silent = try rig.handOn(declaring: 10)
        defer { close(silent) }
        #expect(waitUntil(timeout: 20) { rig.bodies.current.count == 1 })
        // Declares 1,000 and sends a byte every 300 ms: each read gets one in time, so only
        // the bound ends it.
        let trickling = try rig.handOn(declaring: 1000)
        defer { close(trickling) }
        let stop = Kit.LockedBox(false)
        let trickle = Kit.BackgroundCall { () -> Void in
            var record: [UInt8] = []
            FastCGIClient.appendRecord(&record, type: 5, requestID: 1, content: [0x61])
            let end = ContinuousClock.now.advanced(by: .seconds(20))
            while ContinuousClock.now < end && !stop.current {
                let sent = record.withUnsafeBytes {
                    Glibc.send(trickling, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                }
                if sent <= 0 { return }
                usleep(300_000)
            }
        }
        defer {
            stop.withValue { $0 = true }
            _ = trickle.wait(seconds: 5)
        }
        #expect(waitUntil(timeout: 20) { rig.bodies.current.count == 2 })
        let seen = rig.bodies.current
        #expect(seen.map(\.0) == [.incomplete, .incomplete])
        // A read of a byte that is not there fails at once: answered as soon as the worker
        // runs (before, it waited for its 1 s read allowance, or its request's 30 s).
        #expect(seen.allSatisfy { $0.1 < 0.5 }, "answered after \(seen.map(\.1)) s")
    }
}
