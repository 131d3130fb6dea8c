import Foundation
import Glibc
import SIWAFastCGIClient
import SIWASupport
import SIWATestSupport
import Testing

@testable import SIWAFastCGI

/// More complete requests at once than the acceptor's capacity: once its capacity is full
/// of requests waiting for a worker, new connections wait in the listen backlog; the moment
/// a worker takes one, accepting resumes. The acceptor's idle poll timeout is set to 60 s
/// here, so a resumption that waited for that timeout instead of the worker shows as a
/// request unanswered within the test's bound.
@Suite("FastCGI acceptor: accepting resumes as soon as a worker makes room")
struct FastCGIAcceptorRoomTests {
    typealias Kit = FastCGITestKit
    typealias Peer = FastCGIHostilePeerTests.Peer

    @Test("one worker, capacity 16, 40 complete requests at once: all 40 answered 200 well before a 60 s poll timeout")
    func acceptingResumesWhenAWorkerTakesAConnection() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/room.sock"
        let gate = Latch()
        let firstHandled = Latch()
        let handled = Kit.LockedBox(0)
        let server = try FastCGIServer(
            configuration: .init(address: .unixSocket(path: path), workerCount: 1, ioTimeout: .seconds(60)),
            idlePollTimeout: .seconds(60)
        ) { request in
            firstHandled.open()
            // The one worker holds the first request until every peer has sent its own and
            // the acceptor's capacity is full.
            gate.wait()
            handled.withValue { $0 += 1 }
            return FastCGIHostilePeerTests.echoBody(request)
        }
        try server.start()
        defer {
            gate.open()
            server.stop(timeout: .seconds(10))
        }

        let total = 40
        var stdinEnd: [UInt8] = []
        FastCGIClient.appendRecord(&stdinEnd, type: 5, requestID: 1, content: [UInt8]())
        let body = Array("{}".utf8)
        let request =
            FastCGIHostilePeerTests.requestHead(FastCGIHostilePeerTests.postParams(declaring: body.count))
            + FastCGIHostilePeerTests.bodyRecords(body) + stdinEnd
        var peers: [Peer] = []
        for _ in 0..<total {
            let peer = try Peer(path)
            #expect(peer.write(request))
            peers.append(peer)
        }
        #expect(firstHandled.wait(until: .now + .seconds(20)))
        // The worker is held: only an idle worker accepts, so the other 39 wait in the
        // listen backlog, at no descriptor's cost; each is accepted once the worker is free.
        #expect(handled.current == 0)

        let start = ContinuousClock.now
        gate.open()
        let answers = Kit.LockedBox<[Int: [UInt8]]>([:])
        let readers = peers.enumerated().map { index, peer in
            Kit.BackgroundCall {
                let answer = peer.readUntilEnd(seconds: 20)
                answers.withValue { $0[index] = answer }
                return answer != nil
            }
        }
        for reader in readers { _ = reader.wait(seconds: 30) }
        let elapsed = start.duration(to: .now)

        let answered = answers.current
        #expect(answered.count == total, "every peer read to its end (the server closed it) within 20 s")
        let okay = answered.values.filter { FastCGIAcceptorRoomTests.status(of: $0) == 200 }.count
        #expect(okay == total, "all \(total) answered 200, in \(elapsed)")
        #expect(handled.current == total)
        #expect(elapsed < .seconds(20))
    }

    @Test("capacity full of requests still being written: none is closed to make room for a newer connection")
    func requestsStillBeingWrittenAreNotClosedToMakeRoom() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/grace.sock"
        let gate = Latch()
        let firstHandled = Latch()
        let handled = Kit.LockedBox(0)
        // A grace far beyond the test: a connection closed to make room here was closed
        // without it, while its peer was still writing.
        // Two workers: one held by the first request, the other idle, to accept the writers
        // (only an idle worker accepts) and hand them to the poll thread to be watched.
        let server = try FastCGIServer(
            configuration: .init(address: .unixSocket(path: path), workerCount: 2, ioTimeout: .seconds(60)),
            idlePollTimeout: .seconds(1), roomGrace: .seconds(60), watchLimit: 16
        ) { request in
            firstHandled.open()
            gate.wait()
            handled.withValue { $0 += 1 }
            return FastCGIHostilePeerTests.echoBody(request)
        }
        try server.start()
        defer {
            gate.open()
            server.stop(timeout: .seconds(10))
        }

        var stdinEnd: [UInt8] = []
        FastCGIClient.appendRecord(&stdinEnd, type: 5, requestID: 1, content: [UInt8]())
        let body = Array("{}".utf8)
        let begun =
            FastCGIHostilePeerTests.requestHead(FastCGIHostilePeerTests.postParams(declaring: body.count))
            + FastCGIHostilePeerTests.bodyRecords(body)
        // The one worker holds the first request.
        let first = try Peer(path)
        #expect(first.write(begun + stdinEnd))
        #expect(firstHandled.wait(until: .now + .seconds(20)))
        // 16 peers (the watch limit here) send all but the body's end record, as a writer part way
        // through its request: watched, looked at, incomplete.
        var writing: [Peer] = []
        for _ in 0..<16 {
            let peer = try Peer(path)
            #expect(peer.write(begun))
            writing.append(peer)
        }
        #expect(waitUntil(timeout: 20) { server.acceptorIsFull })
        // A newer connection with its whole request: it waits in the backlog.
        let newer = try Peer(path)
        #expect(newer.write(begun + stdinEnd))
        // The writers finish their requests: every one of them is still open to take it.
        for peer in writing { #expect(peer.write(stdinEnd)) }
        gate.open()

        let everyone = [first] + writing + [newer]
        let readers = everyone.map { peer in
            Kit.BackgroundCall { peer.readUntilEnd(seconds: 20).flatMap(FastCGIAcceptorRoomTests.status) ?? -1 }
        }
        let statuses = readers.map { $0.wait(seconds: 30) ?? -2 }
        #expect(statuses == Array(repeating: 200, count: 18), "\(statuses)")
        #expect(handled.current == 18)
    }

    /// The status of a FastCGI answer: its first STDOUT record's "Status: NNN" line.
    static func status(of bytes: [UInt8]) -> Int? {
        guard bytes.count > 8, bytes[1] == 6 else { return nil }
        let length = Int(bytes[4]) << 8 | Int(bytes[5])
        let text = String(decoding: bytes[8..<min(bytes.count, 8 + length)], as: UTF8.self)
        guard let line = text.split(separator: "\r\n").first(where: { $0.hasPrefix("Status: ") }) else { return nil }
        return Int(line.dropFirst("Status: ".count).prefix(3))
    }
}
