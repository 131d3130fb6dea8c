import Foundation
import Glibc
import SIWAFastCGIClient
import SIWASupport
import SIWATestSupport
import Testing

@testable import SIWAFastCGI

/// An idle worker accepts a new connection itself and serves its request when it is whole
/// at the first look, with no hop through the acceptor's poll thread (that hop, a wake of a
/// second thread per request, was the largest cost in serve beyond the work itself). What
/// is not whole yet goes to the poll thread, which watches it as before. Every accepted
/// connection is non-blocking: a worker's read never waits for a byte.
@Suite("FastCGI: idle workers accept, the poll thread watches only what is not whole")
struct FastCGIWorkerAcceptTests {
    typealias Kit = FastCGITestKit
    typealias Peer = FastCGIHostilePeerTests.Peer
    typealias Hostile = FastCGIHostilePeerTests

    /// A listener and an acceptor whose poll thread is NOT running: only what a worker does
    /// itself can hand a connection on.
    final class Rig: @unchecked Sendable {
        let acceptor: FastCGIAcceptor
        let listener: FastCGIListener
        let stopPipe: (read: Int32, write: Int32)
        let path: String

        init(_ directory: Kit.TemporaryDirectory) throws {
            try FastCGILibrary.initialize()
            path = directory.path + "/accept.sock"
            listener = try FastCGIListener(address: .unixSocket(path: path), backlog: 8)
            stopPipe = try FastCGILibrary.makePipe()
            acceptor = try FastCGIAcceptor(
                listenFD: listener.fileDescriptor, stopFD: stopPipe.read, requestTimeout: .seconds(30), workerCount: 1,
                maximumBodyBytes: 64 * 1024)
        }

        func close() {
            listener.closeAndRemove()
            Glibc.close(stopPipe.read)
            Glibc.close(stopPipe.write)
        }
    }

    static func wholeRequest(_ body: [UInt8]) -> [UInt8] {
        var end: [UInt8] = []
        FastCGIClient.appendRecord(&end, type: 5, requestID: 1, content: [UInt8]())
        return Hostile.requestHead(Hostile.postParams(declaring: body.count)) + Hostile.bodyRecords(body) + end
    }

    @Test(
        "a whole request: the worker that accepted it has it, non-blocking and closed on exec, no poll thread involved")
    func wholeRequestServedByTheAcceptingWorker() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let rig = try Rig(directory)
        defer { rig.close() }
        let peer = try Peer(rig.path)
        #expect(peer.write(Self.wholeRequest(Array(#"{"a":1}"#.utf8))))
        let acceptor = rig.acceptor
        let worker = Kit.BackgroundCall { () -> (fd: Int32, contentLength: Int?)? in
            var buffer = [UInt8](repeating: 0, count: acceptor.window)
            return acceptor.next(buffer: &buffer).map { ($0.fd, $0.parameters.contentLength) }
        }
        let handed = try #require(worker.wait(seconds: 20) ?? nil, "no poll thread runs: only the worker hands it on")
        defer { Glibc.close(handed.fd) }
        #expect(handed.contentLength == 7)
        let flags = fcntl(handed.fd, F_GETFL)
        #expect(flags >= 0 && flags & O_NONBLOCK != 0, "non-blocking: a read of a byte that is not there fails at once")
        #expect(fcntl(handed.fd, F_GETFD) & FD_CLOEXEC != 0)
        // Nothing went to the poll thread.
        #expect(acceptor.returnedCount == 0)
    }

    @Test("a request not whole at the first look goes to the poll thread, and no worker holds it")
    func partialRequestGoesToThePollThread() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let rig = try Rig(directory)
        defer { rig.close() }
        let peer = try Peer(rig.path)
        // Parameters and part of the body: the end record never comes.
        let body = Array(#"{"a":1}"#.utf8)
        #expect(peer.write(Hostile.requestHead(Hostile.postParams(declaring: 100)) + Hostile.bodyRecords(body)))
        let acceptor = rig.acceptor
        // A worker accepts it, looks, finds it incomplete and gives it to the poll thread; it
        // then waits for the next connection. A second, whole request shows it is free.
        let second = try Peer(rig.path)
        #expect(second.write(Self.wholeRequest(body)))
        let worker = Kit.BackgroundCall { () -> Int? in
            var buffer = [UInt8](repeating: 0, count: acceptor.window)
            return acceptor.next(buffer: &buffer)?.parameters.contentLength
        }
        #expect((worker.wait(seconds: 20) ?? nil) == 7, "the whole one, by the same worker")
        #expect(acceptor.returnedCount == 1, "the partial one waits for the poll thread")
    }

    /// Found by an adversary's read: a begun request a worker gave the poll thread just before
    /// a stop was closed (nginx: a reset, 502, during a deploy) instead of being finished, as
    /// a begun request already watched is.
    @Test("a begun request given to the poll thread just before a stop is finished, not closed")
    func begunRequestGivenBackBeforeAStopIsFinished() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let rig = try Rig(directory)
        defer { rig.close() }
        let body = [UInt8](repeating: 0x61, count: 100)
        // Parameters whole, half the body: begun.
        let begun = try Peer(rig.path)
        #expect(
            begun.write(
                Hostile.requestHead(Hostile.postParams(declaring: 100)) + Hostile.bodyRecords(Array(body[0..<50]))))
        let whole = try Peer(rig.path)
        #expect(whole.write(Self.wholeRequest(Array(body[0..<7]))))
        let acceptor = rig.acceptor
        // A worker accepts `begun` (not whole: given to the poll thread), then `whole` (its own).
        let first = Kit.BackgroundCall { () -> Int? in
            var buffer = [UInt8](repeating: 0, count: acceptor.window)
            return acceptor.next(buffer: &buffer)?.parameters.contentLength
        }
        #expect((first.wait(seconds: 20) ?? nil) == 7)
        #expect(acceptor.returnedCount == 1)
        // The stop is there before the poll thread first looks: it sees both at once.
        var byte: UInt8 = 1
        _ = write(rig.stopPipe.write, &byte, 1)
        let poller = Kit.BackgroundCall { () -> Bool in
            acceptor.run()
            return true
        }
        #expect(waitUntil(timeout: 20) { acceptor.returnedCount == 0 }, "the poll thread took it")
        // The rest of the body: the request is whole, and a worker gets it.
        #expect(begun.write(Hostile.bodyRecords(Array(body[50..<100])) + Self.wholeRequestEnd()))
        let second = Kit.BackgroundCall { () -> Int? in
            var buffer = [UInt8](repeating: 0, count: acceptor.window)
            return acceptor.next(buffer: &buffer)?.parameters.contentLength
        }
        #expect((second.wait(seconds: 20) ?? nil) == 100, "finished, not closed at the stop")
        #expect(poller.wait(seconds: 40) == true)
    }

    static func wholeRequestEnd() -> [UInt8] {
        var end: [UInt8] = []
        FastCGIClient.appendRecord(&end, type: 5, requestID: 1, content: [UInt8]())
        return end
    }

    /// Found by an adversary's read (older than idle workers accepting): a peer that shuts
    /// its reading side, so the answer's write fails, then trickles a byte every 500 ms held
    /// the worker in libfcgi's lingering close (shutdown, then read for as long as bytes come
    /// within 2 s); W such peers held every worker.
    @Test("a peer that stops reading and trickles holds no worker: /healthz on the one worker in under 5 s")
    func shutReadTrickleHoldsNoWorker() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let handled = Latch()
        let (server, path) = try Hostile.server(directory, workers: 1) { request in
            handled.open()
            return Hostile.echoBody(request)
        }
        defer { server.stop(timeout: .seconds(5)) }
        let stop = Kit.LockedBox(false)
        defer { stop.withValue { $0 = true } }
        let peer = try Peer(path)
        #expect(shutdown(peer.fd, Int32(SHUT_RD)) == 0)
        #expect(peer.write(Self.wholeRequest(Array(#"{"a":1}"#.utf8))))
        // Its request is read and handled; the answer's write fails, and the trickle that
        // follows is what a lingering close would read on.
        #expect(handled.wait(until: .now + .seconds(20)))
        let trickle = Kit.BackgroundCall { peer.trickle(every: .milliseconds(500), for: 12, stop: stop) }
        // Behind it on the one worker: before, it waited for the 12 s trickle to end.
        let latency = Hostile.healthLatency(path)
        #expect(latency != nil && latency! < 5, "healthz took \(String(describing: latency)) s")
        stop.withValue { $0 = true }
        _ = trickle.wait(seconds: 20)
    }
}
