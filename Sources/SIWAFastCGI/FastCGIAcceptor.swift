import Foundation
import Glibc
import Synchronization

/// Accepts connections on one thread and hands a connection to a worker only once its
/// request's header and parameters are waiting in the socket, so no worker ever waits,
/// without a timeout, on a silent peer.
///
/// Why: libfcgi's `FCGX_Accept_r` reads the begin record and the parameters itself, with
/// no timeout, before our code sees the connection; a peer that sent one byte and then
/// nothing held a worker for ever (four such peers, four workers: `/healthz` unanswered).
/// Here a new connection, and a kept connection that a worker hands back, is watched with
/// poll(2) and peeked at (`MSG_PEEK`, nothing is consumed) until the FastCGI records up
/// to the end of the parameters (the empty PARAMS record) are there. The body is read
/// by the worker with the connection's read timeout (`ioTimeout`), as before. A
/// connection still without its parameters after `headerTimeout` is closed: it never
/// had a worker. nginx sends the parameters in one go, so a real request passes at once.
final class FastCGIAcceptor: Sendable {
    /// A connection waiting for its request; `deadline` is set once it has a first byte
    /// (a new connection) or at once (kept connections wait idle without one).
    private struct Watched {
        let fd: Int32
        var deadline: ContinuousClock.Instant?
        var peeked = -1
    }

    private let listenFD: Int32
    private let stopFD: Int32
    private let headerTimeout: Duration
    /// Peeked bytes that let a connection through even before its parameters end (nginx's
    /// are a few KiB; the worker reads on with its timeouts).
    private let enoughBytes: Int
    /// Connections watched at most; beyond it new ones wait in the listen backlog.
    private let maximumWatched = 512

    /// POLLRDHUP (Linux): the peer shut its writing side. Glibc hides the name behind _GNU_SOURCE.
    private static let pollReadHangUp: Int16 = 0x2000

    private struct State {
        /// Connections whose request is waiting, for the workers.
        var ready: [Int32] = []
        /// Kept connections the workers gave back, for the poll thread.
        var returned: [Int32] = []
        var stopping = false
        var finished = false
    }

    private let state = Mutex(State())
    /// One signal per connection made ready, and one at the end (each worker that finds
    /// nothing left passes that one on); a worker checks `state`, so a spare signal costs one check.
    private let available = DispatchSemaphore(value: 0)
    private let wake: (read: Int32, write: Int32)

    init(listenFD: Int32, stopFD: Int32, headerTimeout: Duration) throws(FastCGIError) {
        self.listenFD = listenFD
        self.stopFD = stopFD
        self.headerTimeout = headerTimeout
        self.enoughBytes = 64 * 1024
        wake = try FastCGILibrary.makePipe()
        _ = fcntl(listenFD, F_SETFL, fcntl(listenFD, F_GETFL) | O_NONBLOCK)
        for end in [wake.read, wake.write] { _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK) }
    }

    /// The next connection whose request is waiting; nil once stopping and none is left.
    func next() -> Int32? {
        while true {
            let (fd, finished) = state.withLock { state -> (Int32?, Bool) in
                state.ready.isEmpty ? (nil, state.finished) : (state.ready.removeFirst(), false)
            }
            if let fd { return fd }
            if finished {
                available.signal()
                return nil
            }
            available.wait()
        }
    }

    /// A kept connection (nginx's `fastcgi_keep_conn`) goes back to be watched for its
    /// next request; when stopping it is closed instead.
    func watchAgain(_ fd: Int32) {
        state.withLock { state in
            guard !state.stopping else {
                shutdown(fd, Int32(SHUT_RDWR))
                close(fd)
                return
            }
            state.returned.append(fd)
            // Under the lock: the pipe is closed only after `stopping` is set, under it too.
            var byte: UInt8 = 1
            _ = write(wake.write, &byte, 1)
        }
    }

    /// The poll loop; returns once `stopFD` is readable. Connections still incomplete are
    /// closed; those already complete stay queued for the workers, which finish them.
    func run() {
        // The connections waiting for their request: the poll thread's own list.
        var watched: [Watched] = []
        // Where peeks land: made once (64 KiB zeroed on every pass was a visible cost).
        var peekBuffer = [UInt8](repeating: 0, count: enoughBytes)
        while true {
            var fds: [pollfd] = [
                pollfd(fd: stopFD, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
                pollfd(fd: watched.count < maximumWatched ? listenFD : -1, events: Int16(POLLIN), revents: 0),
            ]
            // A connection already peeked and still incomplete is re-peeked on a short tick
            // (its unread bytes would make poll return at once, for ever).
            var tick = false
            for entry in watched {
                let waiting = entry.peeked > 0
                tick = tick || waiting
                fds.append(pollfd(fd: entry.fd, events: waiting ? Self.pollReadHangUp : Int16(POLLIN), revents: 0))
            }
            let now = ContinuousClock.now
            var timeout: Int32 = tick ? 20 : 1000
            if let soonest = watched.compactMap(\.deadline).min() {
                let milliseconds = (now.duration(to: soonest) / .milliseconds(1)).rounded(.up)
                timeout = min(timeout, Int32(max(0, min(1000, milliseconds))))
            }
            let count = poll(&fds, nfds_t(fds.count), timeout)
            if count < 0 && errno != EINTR { break }
            if fds[0].revents != 0 { break }
            if fds[1].revents != 0 { takeReturned(into: &watched) }
            if fds[2].revents != 0 { acceptWaiting(into: &watched) }
            examine(&watched, events: Array(fds.dropFirst(3)), buffer: &peekBuffer)
        }
        shutDown(closing: watched)
    }

    private func takeReturned(into watched: inout [Watched]) {
        var byte = [UInt8](repeating: 0, count: 64)
        while read(wake.read, &byte, byte.count) > 0 {}
        let fds = state.withLock { state in
            defer { state.returned = [] }
            return state.returned
        }
        watched += fds.map { Watched(fd: $0, deadline: nil) }
    }

    private func acceptWaiting(into watched: inout [Watched]) {
        while watched.count < maximumWatched {
            let fd = accept(listenFD, nil, nil)
            guard fd >= 0 else { return }  // EAGAIN: none left; EMFILE: the next tick retries
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            watched.append(Watched(fd: fd, deadline: ContinuousClock.now.advanced(by: headerTimeout)))
        }
    }

    /// Peeks at each watched connection: hands on the complete ones, closes the dead and
    /// the expired.
    private func examine(_ watched: inout [Watched], events: [pollfd], buffer: inout [UInt8]) {
        let now = ContinuousClock.now
        var kept: [Watched] = []
        var handed: [Int32] = []
        for (index, var entry) in watched.enumerated() {
            let revents = index < events.count ? events[index].revents : 0
            let peeked = recv(entry.fd, &buffer, buffer.count, Int32(MSG_PEEK | MSG_DONTWAIT))
            if peeked > 0 {
                if entry.deadline == nil { entry.deadline = now.advanced(by: headerTimeout) }
                switch Self.requestState(buffer[0..<peeked]) {
                case .complete:
                    handed.append(entry.fd)
                    continue
                case .garbage:
                    close(entry.fd)
                    continue
                case .partial:
                    if peeked >= enoughBytes || revents & (Self.pollReadHangUp | Int16(POLLHUP)) != 0 {
                        // Enough to be a large body, or the peer has said all it will:
                        // either way a worker is not left waiting on a silent peer.
                        handed.append(entry.fd)
                        continue
                    }
                    entry.peeked = peeked
                }
            } else if peeked == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                close(entry.fd)  // the peer left before sending a request
                continue
            }
            if let deadline = entry.deadline, deadline <= now {
                close(entry.fd)  // a silent peer: it never had a worker
                continue
            }
            kept.append(entry)
        }
        watched = kept
        guard !handed.isEmpty else { return }
        state.withLock { $0.ready += handed }
        for _ in handed { available.signal() }
    }

    enum RequestState { case complete, partial, garbage }

    /// Walks FastCGI record headers (version 1; type; request id; content length; padding):
    /// complete once the empty PARAMS record that ends the parameters is there.
    static func requestState(_ bytes: ArraySlice<UInt8>) -> RequestState {
        var offset = bytes.startIndex
        while bytes.endIndex - offset >= 8 {
            guard bytes[offset] == 1 else { return .garbage }
            let type = bytes[offset + 1]
            let length = Int(bytes[offset + 4]) << 8 | Int(bytes[offset + 5])
            let padding = Int(bytes[offset + 6])
            if type == 4 && length == 0 { return .complete }
            offset += 8 + length + padding
        }
        return .partial
    }

    private func shutDown(closing watched: [Watched]) {
        for entry in watched {
            shutdown(entry.fd, Int32(SHUT_RDWR))
            close(entry.fd)
        }
        let leftovers = state.withLock { state in
            state.stopping = true
            state.finished = true
            defer { state.returned = [] }
            return state.returned
        }
        available.signal()
        for fd in leftovers {
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
        }
        state.withLock { _ in
            close(wake.read)
            close(wake.write)
        }
    }
}
