import Foundation
import Glibc
import SIWAFastCGIClient
import SIWATestKit
import SIWATestSupport
import Testing

@testable import SIWAFastCGI

/// The acceptor's room rules at the rates that used to defeat them: requests cut short just
/// inside the body limit, peers answered 413 that keep their connection open, and floods
/// of silent connections. Each test measures `/healthz` on the real socket while the peers
/// are at it; the bounds tell "a worker and room were free" (milliseconds) from "the peers
/// held them" (the 30 s request deadline, or seconds of backlog).
@Suite("FastCGI: hostile peers at any rate hold no worker and no room")
struct FastCGIPeerRateTests {
    typealias Kit = FastCGITestKit
    typealias Peer = FastCGIHostilePeerTests.Peer
    typealias Hostile = FastCGIHostilePeerTests

    static func server(
        _ directory: Kit.TemporaryDirectory, workers: Int, watchLimit: Int? = nil,
        refusals: Kit.LockedBox<[FastCGIRefusal]> = Kit.LockedBox([]),
        handled: Kit.LockedBox<[String]> = Kit.LockedBox([])
    ) throws -> (FastCGIServer, String) {
        let path = directory.path + "/rate.sock"
        let server = try FastCGIServer(
            configuration: .init(address: .unixSocket(path: path), workerCount: workers, ioTimeout: .seconds(30)),
            idlePollTimeout: FastCGIAcceptor.defaultIdlePollTimeout, watchLimit: watchLimit,
            onRefusal: { reason in refusals.withValue { $0.append(reason) } }
        ) { request in
            handled.withValue { $0.append(request.path) }
            return Hostile.echoBody(request)
        }
        try server.start()
        return (server, path)
    }

    /// True while the server has not closed `peer`'s connection (nothing to read, no hang-up).
    static func isOpen(_ peer: Peer) -> Bool {
        var entry = pollfd(fd: peer.fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 0) == 0
    }

    @Test("workers+1 requests cut short just inside the 64 KiB limit: /healthz in under 2 s, no worker reads them")
    func cutShortRequestsHoldNoWorker() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let handled = Kit.LockedBox<[String]>([])
        let (server, path) = try Self.server(directory, workers: 2, handled: handled)
        defer { server.stop(timeout: .seconds(10)) }
        // Three peers for two workers: parameters declaring 65,536 bytes and all of them,
        // but never the empty record that ends the body. Before, the 64 KiB window filled,
        // a worker took each and waited for the end until the 30 s deadline.
        let peers = try (0..<3).map { _ in try Peer(path) }
        for peer in peers {
            #expect(
                peer.write(
                    Hostile.requestHead(Hostile.postParams(declaring: 65_536))
                        + Hostile.bodyRecords([UInt8](repeating: 0x61, count: 65_536))))
        }
        // /healthz after them, twice (both workers would be needed if one were held).
        for _ in 0..<2 {
            let latency = Hostile.healthLatency(path)
            #expect(latency != nil && latency! < 2, "healthz took \(String(describing: latency)) s")
        }
        #expect(handled.current == ["/healthz", "/healthz"], "no worker was handed a request cut short")
        #expect(peers.allSatisfy(Self.isOpen), "waiting in the acceptor for their end, unanswered")
        // Their end arrives: each is whole now, and answered.
        var stdinEnd: [UInt8] = []
        FastCGIClient.appendRecord(&stdinEnd, type: 5, requestID: 1, content: [UInt8]())
        for peer in peers { #expect(peer.write(stdinEnd)) }
        for peer in peers {
            let answer = String(decoding: peer.readUntilEnd(seconds: 20) ?? [], as: UTF8.self)
            #expect(answer.contains("Status: 200") && answer.contains("65536"), "\(answer)")
        }
    }

    @Test("over the limit without its end: 413 at once; more than the largest request: refused, reported once")
    func overLimitAnsweredAtOnceOverBufferRefused() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let refusals = Kit.LockedBox<[FastCGIRefusal]>([])
        let handled = Kit.LockedBox<[String]>([])
        let (server, path) = try Self.server(directory, workers: 1, refusals: refusals, handled: handled)
        defer { server.stop(timeout: .seconds(10)) }
        #expect(server.acceptorBounds?.window == 64 * 1024 + 64 * 1024)
        // Declares more than the limit: a worker answers 413 without reading a body byte.
        let declaresTooMuch = try Peer(path)
        #expect(declaresTooMuch.write(Hostile.requestHead(Hostile.postParams(declaring: 100_000)) + [1, 5, 0, 1]))
        // Declares 1,000 and sends 70,000 body bytes, unended: the worker reads the limit
        // and one byte, all already there, and answers 413.
        let sendsTooMuch = try Peer(path)
        #expect(
            sendsTooMuch.write(
                Hostile.requestHead(Hostile.postParams(declaring: 1000))
                    + Hostile.bodyRecords([UInt8](repeating: 0x61, count: 70_000))))
        for peer in [declaresTooMuch, sendsTooMuch] {
            var answer = ""
            let elapsed = Kit.measure {
                answer = String(decoding: peer.readUntilEnd(seconds: 20) ?? [], as: UTF8.self)
            }
            #expect(answer.contains("Status: 413"), "\(answer)")
            #expect(elapsed < 5, "answered after \(elapsed) s, not at the 30 s deadline")
        }
        // Parameters that never end, more than the window (128 KiB) of them: no request a
        // worker could answer; closed by the acceptor, named once.
        let overBuffer = try Peer(path)
        var head: [UInt8] = []
        FastCGIClient.appendRecord(&head, type: 1, requestID: 1, content: [0, 1, 0, 0, 0, 0, 0, 0])
        let filler = [UInt8](repeating: 0x61, count: 65_000)
        for _ in 0..<3 { FastCGIClient.appendRecord(&head, type: 4, requestID: 1, content: filler) }
        _ = overBuffer.write(head)
        #expect(overBuffer.readUntilEnd(seconds: 20) == [], "closed unanswered")
        #expect(waitUntil(timeout: 10) { refusals.current == [.requestOverBuffer] }, "\(refusals.current)")
        let latency = Hostile.healthLatency(path)
        #expect(latency != nil && latency! < 2, "healthz took \(String(describing: latency)) s")
        #expect(handled.current == ["/apple/notifications", "/apple/notifications", "/healthz"])
        #expect(refusals.current == [.requestOverBuffer])
    }

    @Test("peers answered 413 that keep their connection open, 25 a second for 4 s: /healthz stays under 1.5 s")
    func drainedPeersTakeNoRoom() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let (server, path) = try Self.server(directory, workers: 2)
        defer { server.stop(timeout: .seconds(10)) }
        let capacity = try #require(server.acceptorBounds?.capacity)
        #expect(capacity == 16)
        // Each declares 10 MB and sends 66,000 bytes (the old 64 KiB window's worth), is
        // answered 413 at once, then sends nothing and never closes: drained for 2 s.
        // Before, they counted against the 16 and could not be closed to make room: 8 a
        // second left the acceptor, 25 came.
        let flood = Kit.BackgroundCall { () -> [Peer] in
            var peers: [Peer] = []
            let request =
                Hostile.requestHead(Hostile.postParams(declaring: 10_000_000))
                + Hostile.bodyRecords([UInt8](repeating: 0x61, count: 66_000))
            let start = ContinuousClock.now
            for index in 0..<100 {
                // At 40 ms intervals from the start, whatever each connect cost.
                let due = start.advanced(by: .milliseconds(40 * index))
                let wait = ContinuousClock.now.duration(to: due)
                if wait > .zero { usleep(UInt32(wait / .microseconds(1))) }
                guard let peer = try? Peer(path) else { continue }
                _ = peer.write(request)
                peers.append(peer)
            }
            return peers
        }
        // /healthz from 1 s into the flood to its end.
        usleep(1_000_000)
        var latencies: [Double?] = []
        for _ in 0..<6 {
            latencies.append(Hostile.healthLatency(path))
            usleep(400_000)
        }
        let peers = try #require(flood.wait(seconds: 60))
        #expect(peers.count == 100)
        #expect(latencies.allSatisfy { $0 != nil && $0! < 1.5 }, "healthz took \(latencies) s")
        // Every flood peer had its 413, and its connection ended (drained at most 2 s, or
        // closed sooner when its budget was wanted for a newer one).
        var statuses: [Int: Int] = [:]
        for peer in peers {
            let status = peer.readUntilEnd(seconds: 20).flatMap(FastCGIAcceptorRoomTests.status) ?? -1
            statuses[status, default: 0] += 1
        }
        #expect(statuses == [413: 100], "\(statuses)")
    }

    @Test("300 silent connections at once: all still open, /healthz in under 2 s")
    func silentFloodWaitsInTheAcceptor() throws {
        ServeBacklogTests.raiseDescriptorLimit()
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let (server, path) = try Self.server(directory, workers: 2)
        defer { server.stop(timeout: .seconds(10)) }
        let watchLimit = try #require(server.acceptorBounds?.watchLimit)
        #expect(watchLimit >= 600, "watch limit \(watchLimit)")
        // One byte of a header each, then nothing. Before, 16 were watched and the oldest
        // could go only after 250 ms: 64 a second; /healthz waited behind the rest.
        var peers: [Peer] = []
        for _ in 0..<300 {
            let peer = try Peer(path)
            #expect(peer.write([1]))
            peers.append(peer)
        }
        let latency = Hostile.healthLatency(path)
        #expect(latency != nil && latency! < 2, "healthz took \(String(describing: latency)) s")
        #expect(peers.filter(Self.isOpen).count == 300, "none closed to make room")
    }

    @Test("silent connections beyond the watch limit: the oldest are closed first, the newest wait on")
    func oldestSilentConnectionMakesRoom() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let (server, path) = try Self.server(directory, workers: 2, watchLimit: 40)
        defer { server.stop(timeout: .seconds(10)) }
        var peers: [Peer] = []
        for _ in 0..<40 {
            let peer = try Peer(path)
            #expect(peer.write([1]))
            peers.append(peer)
        }
        // 40 held fill the limit. (Not `acceptorIsFull`: that holds only until the oldest has
        // waited 250 ms, when a newcomer may take its place; a busy machine's polls missed it.)
        #expect(
            waitUntil(timeout: 20) { server.acceptorHeldConnections == 40 },
            "40 watched fill the limit: \(server.acceptorHeldConnections) held")
        // /healthz makes room: the oldest silent one goes (once it has waited 250 ms), and
        // /healthz, answered, leaves a place behind.
        let latency = Hostile.healthLatency(path)
        #expect(latency != nil && latency! < 2, "healthz took \(String(describing: latency)) s")
        #expect(waitUntil(timeout: 20) { !Self.isOpen(peers[0]) })
        // Ten more, one at a time: the first takes the place /healthz left, each of the
        // others makes the next oldest go.
        for _ in 0..<10 {
            let peer = try Peer(path)
            #expect(peer.write([1]))
            peers.append(peer)
            #expect(waitUntil(timeout: 20) { !Self.isOpen(peers[peers.count - 41]) })
        }
        var open: [Int] = []
        #expect(
            waitUntil(timeout: 10) {
                open = peers.indices.filter { Self.isOpen(peers[$0]) }
                return open == Array(10..<50)
            }, "open: \(open), held: \(server.acceptorHeldConnections)")
    }

    @Test("serve: more than the largest allowed request is closed unanswered, one fastcgi_request_refused line")
    func serveLogsTheRefusalOnce() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        guard let serve = stack.serve else { throw ServeProcess.StartFailure(description: "no serve") }
        // Parameters that never end, 195,000 bytes of them: past the 128 KiB window.
        let peer = try Peer(stack.socketPath)
        var head: [UInt8] = []
        FastCGIClient.appendRecord(&head, type: 1, requestID: 1, content: [0, 1, 0, 0, 0, 0, 0, 0])
        let filler = [UInt8](repeating: 0x61, count: 65_000)
        for _ in 0..<3 { FastCGIClient.appendRecord(&head, type: 4, requestID: 1, content: filler) }
        _ = peer.write(head)
        #expect(peer.readUntilEnd(seconds: 20) == [], "closed unanswered")
        #expect(stack.waitUntil(timeout: 10) { !serve.logLines(event: "fastcgi_request_refused").isEmpty })
        #expect(try stack.health().status == 200)
        let lines = serve.logLines(event: "fastcgi_request_refused")
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first?.contains(#""reason":"request_over_buffer""#) == true, "\(lines)")
        #expect(lines.first?.contains(#""level":"warning""#) == true, "\(lines)")
    }
}
