import Foundation
import Glibc
import Synchronization

/// Accepts connections on one thread and hands a connection to a worker only once its
/// request is waiting in the socket, so that no peer allowed on the socket can take a
/// worker away from Apple and `/healthz`.
///
/// Why: libfcgi's `FCGX_Accept_r` reads the begin record and the parameters itself, with
/// no timeout, and reads the body with only a per-read timeout, so a peer that sent one
/// byte and then nothing, or trickled its body a byte at a time, held a worker for as
/// long as it liked. Here:
/// - a new connection, and a kept connection that a worker hands back, is watched with
///   poll(2) and peeked at (`MSG_PEEK`, nothing is consumed) until its whole request is
///   there: a BEGIN_REQUEST, its PARAMS up to the empty record, and its STDIN up to the
///   empty record, all of the same request id. Anything else in that place (a PARAMS
///   record without a BEGIN_REQUEST, another request id, another record type) closes
///   the connection without a worker. A body larger than the peek window (64 KiB) is
///   handed on once the parameters are complete and the window is full; the worker then
///   reads the rest, within the same deadline.
/// - one deadline per request (`requestTimeout` from the connection's accept, or from
///   the first byte of a kept connection's next request) bounds the parameters and the
///   body together, here and in the worker: at the deadline a connection still watched
///   is closed, and the reading side of one a worker is reading is shut down, which
///   ends that read at once.
/// - a kept connection (`FCGI_KEEP_CONN`) waits idle for its next request at most
///   `requestTimeout` too.
/// - a connection answered with input left unread is drained here (at most
///   `drainBytes` or `drainTime`), then closed: no worker lingers on it.
/// - watched and waiting connections together are bounded (`capacity`, four per
///   worker and at least 16): beyond it new connections wait in the kernel's listen
///   backlog; when the watched ones fill it, the one watched longest is closed to make
///   room (once it has waited `roomGrace`: a peer still writing the request it has
///   just connected for is never closed; nor is one whose request has come in whole,
///   which is handed on first), so idle or silent peers never take the listener away.
///   A worker taking a connection while the listener is set aside wakes the poll
///   thread at once, so accepting resumes as soon as there is room, not at the next
///   poll timeout.
/// - accept(2) failing for want of descriptors (EMFILE, ENFILE) pauses accepting for a
///   moment instead of retrying at once.
final class FastCGIAcceptor: Sendable {
    /// A connection waiting here: for its request, or being drained before it is closed.
    private struct Watched {
        let fd: Int32
        var draining: Bool
        /// When it began waiting here: the one waiting longest makes room first.
        let since: ContinuousClock.Instant
        var deadline: ContinuousClock.Instant
        /// A kept connection without a byte of its next request yet.
        var idle: Bool
        var peeked = -1
        /// Peeked at least once: a connection not yet looked at is never closed to make room.
        var examined = false
        var drainLeft = 0

        /// Closed to make room only once looked at and waiting here since `cutoff` or
        /// before (`roomGrace` ago): never a connection whose peer is still writing the
        /// request it has just connected for.
        func mayMakeRoom(waitingSince cutoff: ContinuousClock.Instant) -> Bool {
            examined && !draining && since <= cutoff
        }
    }

    /// A connection handed to the workers: its request, and the request's deadline.
    struct Handed {
        let fd: Int32
        let deadline: ContinuousClock.Instant
    }

    private let listenFD: Int32
    private let stopFD: Int32
    private let requestTimeout: Duration
    /// The longest poll(2) waits with nothing due: only a bound, since every event that
    /// lets the poll thread act (a connection, a byte, one given back, room made by a
    /// worker, a stop) wakes it.
    private let idlePollTimeout: Duration
    /// How long a connection waits here at least before it may be closed to make room.
    private let roomGrace: Duration
    /// Peeked bytes that let a request through once its parameters are complete even
    /// before its body ends (nginx's parameters are a few KiB; a body beyond this is read
    /// by the worker, within the request's deadline).
    private let enoughBytes: Int
    /// Watched connections plus those waiting for a worker, at most.
    let capacity: Int
    /// Unread input a closing connection may still send, and for how long, before it is closed.
    static let drainBytes = 64 * 1024
    static let drainTime: Duration = .seconds(2)
    /// The default `idlePollTimeout`.
    static let defaultIdlePollTimeout: Duration = .seconds(1)
    /// How long a connection waits here at least before it may be closed to make room:
    /// nginx writes its request as soon as it has connected (microseconds; milliseconds on
    /// a loaded machine), an idle or silent peer waits far longer.
    static let defaultRoomGrace: Duration = .milliseconds(250)
    /// How long accepting pauses after accept(2) found no descriptor left.
    static let descriptorShortagePause: Duration = .milliseconds(250)

    /// POLLRDHUP (Linux): the peer shut its writing side. Glibc hides the name behind _GNU_SOURCE.
    private static let pollReadHangUp: Int16 = 0x2000

    private struct State {
        /// Connections whose request is waiting, for the workers.
        var ready: [Handed] = []
        /// Connections the workers gave back, for the poll thread: kept ones (false) and
        /// ones to drain and close (true).
        var returned: [(fd: Int32, draining: Bool)] = []
        /// Connections a worker is reading from, with the deadline of their request.
        var reading: [Int32: ContinuousClock.Instant] = [:]
        /// The poll thread left the listener out of its poll for want of room: the next
        /// worker taking a connection wakes it (room may have appeared).
        var listenerSetAside = false
        var stopping = false
        var finished = false
    }

    private let state = Mutex(State())
    /// One signal per connection made ready, and one at the end (each worker that finds
    /// nothing left passes that one on); a worker checks `state`, so a spare signal costs one check.
    private let available = DispatchSemaphore(value: 0)
    private let wake: (read: Int32, write: Int32)

    init(
        listenFD: Int32, stopFD: Int32, requestTimeout: Duration, workerCount: Int,
        idlePollTimeout: Duration = defaultIdlePollTimeout, roomGrace: Duration = defaultRoomGrace
    ) throws(FastCGIError) {
        self.listenFD = listenFD
        self.stopFD = stopFD
        self.requestTimeout = requestTimeout
        self.idlePollTimeout = idlePollTimeout
        self.roomGrace = roomGrace
        self.enoughBytes = 64 * 1024
        self.capacity = max(16, 4 * workerCount)
        wake = try FastCGILibrary.makePipe()
        _ = fcntl(listenFD, F_SETFL, fcntl(listenFD, F_GETFL) | O_NONBLOCK)
        for end in [wake.read, wake.write] { _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK) }
    }

    /// The poll thread left the listener out of its poll for want of room.
    var listenerIsSetAside: Bool { state.withLock { $0.listenerSetAside } }

    /// The next connection whose request is waiting; nil once stopping and none is left.
    func next() -> Handed? {
        while true {
            let (handed, finished, madeRoom) = state.withLock { state -> (Handed?, Bool, Bool) in
                guard !state.ready.isEmpty else { return (nil, state.finished, false) }
                let madeRoom = state.listenerSetAside
                state.listenerSetAside = false
                return (state.ready.removeFirst(), false, madeRoom)
            }
            // Room below capacity: the poll thread looks again now, not at its timeout.
            if madeRoom { wakePollThread() }
            if let handed { return handed }
            if finished {
                available.signal()
                return nil
            }
            available.wait()
        }
    }

    /// A worker starts reading `fd`'s request: past `deadline` its reading side is shut
    /// down (a blocked read returns at once). At least a second is left to a request that
    /// waited for a worker, whose bytes are already here. The acceptor holds a duplicate of
    /// the descriptor (shutdown acts on the socket, whichever descriptor names it), so
    /// that libfcgi closing its own after a protocol error can never leave the acceptor
    /// with a number that another connection has been given meanwhile.
    func beginReading(_ fd: Int32, deadline: ContinuousClock.Instant) -> Int32 {
        let watched = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        // No descriptor to spare: each read keeps its own timeout, as before.
        guard watched >= 0 else { return -1 }
        let bound = max(deadline, ContinuousClock.now.advanced(by: .seconds(1)))
        state.withLock { $0.reading[watched] = bound }
        return watched
    }

    /// The worker is done reading; the acceptor lets go of the duplicate `beginReading` gave.
    /// Closed after the lock is let go (no system call under the lock every worker and the
    /// poll thread share): once out of `reading`, the poll thread never touches that number.
    func endReading(_ watched: Int32) {
        guard watched >= 0 else { return }
        state.withLock { $0.reading[watched] = nil }
        close(watched)
    }

    /// A kept connection (nginx's `fastcgi_keep_conn`) goes back to be watched for its
    /// next request; when stopping it is closed instead.
    func watchAgain(_ fd: Int32) { giveBack(fd, draining: false) }

    /// A connection answered with input left unread: its writing side is already shut;
    /// it is drained here, bounded, then closed.
    func drainAndClose(_ fd: Int32) { giveBack(fd, draining: true) }

    private func giveBack(_ fd: Int32, draining: Bool) {
        state.withLock { state in
            guard !state.stopping else {
                shutdown(fd, Int32(SHUT_RDWR))
                close(fd)
                return
            }
            state.returned.append((fd, draining))
        }
        wakePollThread()
    }

    /// Makes the poll thread's poll return (once it has returned for good, the byte is
    /// never read). Outside the state lock: a system call under the lock the workers and
    /// the poll thread share made them spin on it. The pipe stays open as long as the
    /// acceptor does.
    private func wakePollThread() {
        var byte: UInt8 = 1
        _ = write(wake.write, &byte, 1)
    }

    /// The poll loop; returns once `stopFD` is readable. Connections still incomplete are
    /// closed; those already complete stay queued for the workers, which finish them.
    func run() {
        // The connections waiting for their request: the poll thread's own list.
        var watched: [Watched] = []
        // Where peeks land: made once (64 KiB zeroed on every pass was a visible cost).
        var peekBuffer = [UInt8](repeating: 0, count: enoughBytes)
        var acceptingFrom = ContinuousClock.now
        while true {
            let now = ContinuousClock.now
            let pausedForDescriptors = now < acceptingFrom
            let (soonestRead, listening) = state.withLock { state in
                let room = mayAccept(watched: watched, waiting: state.ready.count, now: now)
                // Set under the same lock as the count it was judged on: a worker taking a
                // connection after this wakes the poll below.
                state.listenerSetAside = !room
                return (state.reading.values.min(), room && !pausedForDescriptors)
            }
            var fds: [pollfd] = [
                pollfd(fd: stopFD, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
                pollfd(fd: listening ? listenFD : -1, events: Int16(POLLIN), revents: 0),
            ]
            // A connection already peeked and still incomplete is re-peeked on a short tick
            // (its unread bytes would make poll return at once, for ever).
            var tick = false
            for entry in watched {
                let peekedBefore = !entry.draining && entry.peeked > 0
                tick = tick || peekedBefore
                fds.append(pollfd(fd: entry.fd, events: peekedBefore ? Self.pollReadHangUp : Int16(POLLIN), revents: 0))
            }
            var soonest = watched.map(\.deadline).min()
            if let soonestRead { soonest = min(soonest ?? soonestRead, soonestRead) }
            if now < acceptingFrom { soonest = min(soonest ?? acceptingFrom, acceptingFrom) }
            // Full, with connections too young to be closed to make room: look again when
            // the oldest of them may go.
            if !listening, let roomAt = watched.filter(\.examined).map(\.since).min()?.advanced(by: roomGrace),
                roomAt > now
            {
                soonest = min(soonest ?? roomAt, roomAt)
            }
            let idleMilliseconds = Int32(clamping: Int((idlePollTimeout / .milliseconds(1)).rounded(.up)))
            var timeout: Int32 = tick ? 20 : idleMilliseconds
            if let soonest {
                let milliseconds = (now.duration(to: soonest) / .milliseconds(1)).rounded(.up)
                timeout = min(timeout, Int32(max(0, min(Double(idleMilliseconds), milliseconds))))
            }
            let count = poll(&fds, nfds_t(fds.count), timeout)
            if count < 0 && errno != EINTR { break }
            if fds[0].revents != 0 { break }
            if fds[1].revents != 0 { takeReturned(into: &watched) }
            // Examined before accepting: a request that has just come in whole is handed on,
            // never closed to make room for a newer connection.
            var events: [Int32: Int16] = [:]
            for entry in fds.dropFirst(3) where entry.revents != 0 { events[entry.fd] = entry.revents }
            examine(&watched, events: events, buffer: &peekBuffer)
            if fds[2].revents != 0 {
                // Counted again: examining handed connections on to the workers.
                let waitingNow = state.withLock { $0.ready.count }
                if !acceptWaiting(into: &watched, waiting: waitingNow) {
                    acceptingFrom = ContinuousClock.now.advanced(by: Self.descriptorShortagePause)
                }
            }
            endExpiredReads()
        }
        shutDown(closing: watched)
    }

    /// Room for one more connection: below capacity, or the watched ones (not those
    /// waiting for a worker, which the backlog stands in for) fill it and one can go.
    private func mayAccept(watched: [Watched], waiting: Int, now: ContinuousClock.Instant) -> Bool {
        watched.count + waiting < capacity
            || (waiting < capacity / 2 && watched.contains { $0.mayMakeRoom(waitingSince: now - roomGrace) })
    }

    private func takeReturned(into watched: inout [Watched]) {
        var byte = [UInt8](repeating: 0, count: 64)
        while read(wake.read, &byte, byte.count) > 0 {}
        let returned = state.withLock { state in
            defer { state.returned = [] }
            return state.returned
        }
        let now = ContinuousClock.now
        for (fd, draining) in returned {
            if draining {
                watched.append(
                    Watched(
                        fd: fd, draining: true, since: now, deadline: now.advanced(by: Self.drainTime), idle: false,
                        drainLeft: Self.drainBytes))
            } else {
                watched.append(
                    Watched(fd: fd, draining: false, since: now, deadline: now.advanced(by: requestTimeout), idle: true)
                )
            }
        }
    }

    /// Accepts what the listen backlog holds, within capacity (closing the connection
    /// watched longest to make room when the watched ones fill it). False when accept(2)
    /// found no descriptor left: accepting pauses, the backlog keeps the connections.
    private func acceptWaiting(into watched: inout [Watched], waiting: Int) -> Bool {
        while true {
            if watched.count + waiting >= capacity {
                guard waiting < capacity / 2, let oldest = Self.longestWatched(watched, waitingSince: .now - roomGrace)
                else { return true }
                let fd = accept(listenFD, nil, nil)
                guard fd >= 0 else { return !Self.isDescriptorShortage(errno) }
                shutdown(watched[oldest].fd, Int32(SHUT_RDWR))
                close(watched[oldest].fd)
                watched.remove(at: oldest)
                add(fd, to: &watched)
                // One at a time: the next pass looks at this one before anything else goes.
                return true
            }
            let fd = accept(listenFD, nil, nil)
            guard fd >= 0 else { return !Self.isDescriptorShortage(errno) }  // EAGAIN: none left
            add(fd, to: &watched)
        }
    }

    private func add(_ fd: Int32, to watched: inout [Watched]) {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        let now = ContinuousClock.now
        watched.append(
            Watched(fd: fd, draining: false, since: now, deadline: now.advanced(by: requestTimeout), idle: false))
    }

    /// The connection waiting here longest of those that may be closed to make room, if any.
    private static func longestWatched(_ watched: [Watched], waitingSince cutoff: ContinuousClock.Instant) -> Int? {
        watched.indices.filter { watched[$0].mayMakeRoom(waitingSince: cutoff) }.min {
            watched[$0].since < watched[$1].since
        }
    }

    static func isDescriptorShortage(_ code: Int32) -> Bool {
        code == EMFILE || code == ENFILE || code == ENOBUFS || code == ENOMEM
    }

    /// Peeks at each watched connection: hands on the complete ones, closes the dead, the
    /// malformed and the expired, drains those being closed.
    private func examine(_ watched: inout [Watched], events: [Int32: Int16], buffer: inout [UInt8]) {
        let now = ContinuousClock.now
        var kept: [Watched] = []
        var handed: [Handed] = []
        for var entry in watched {
            let revents = events[entry.fd] ?? 0
            if entry.draining {
                if drain(&entry, buffer: &buffer), entry.deadline > now {
                    kept.append(entry)
                } else {
                    close(entry.fd)
                }
                continue
            }
            entry.examined = true
            let peeked = recv(entry.fd, &buffer, buffer.count, Int32(MSG_PEEK | MSG_DONTWAIT))
            if peeked > 0 {
                if entry.idle {
                    // A kept connection's next request begins: its own deadline starts now.
                    entry.idle = false
                    entry.deadline = now.advanced(by: requestTimeout)
                }
                let hungUp = revents & (Self.pollReadHangUp | Int16(POLLHUP)) != 0
                switch Self.requestState(buffer[0..<peeked]) {
                case .complete:
                    handed.append(Handed(fd: entry.fd, deadline: entry.deadline))
                    continue
                case .garbage:
                    close(entry.fd)
                    continue
                case .parametersComplete where peeked >= enoughBytes || hungUp:
                    // A body larger than the window, or a peer that has said all it will:
                    // the worker reads the rest within the request's deadline.
                    handed.append(Handed(fd: entry.fd, deadline: entry.deadline))
                    continue
                case .partial where peeked >= enoughBytes || hungUp:
                    // Parameters larger than the window, or cut short: never a request.
                    close(entry.fd)
                    continue
                case .partial, .parametersComplete:
                    entry.peeked = peeked
                }
            } else if peeked == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                close(entry.fd)  // the peer left before sending a request
                continue
            }
            if entry.deadline <= now {
                close(entry.fd)  // a silent or slow peer, or an idle kept connection: it never had a worker
                continue
            }
            kept.append(entry)
        }
        watched = kept
        guard !handed.isEmpty else { return }
        state.withLock { $0.ready += handed }
        for _ in handed { available.signal() }
    }

    /// Reads and discards what a closing connection sends; false once it is to be closed
    /// (the peer closed, an error, or its allowance is used up).
    private func drain(_ entry: inout Watched, buffer: inout [UInt8]) -> Bool {
        let count = recv(entry.fd, &buffer, min(buffer.count, entry.drainLeft), Int32(MSG_DONTWAIT))
        if count > 0 {
            entry.drainLeft -= count
            return entry.drainLeft > 0
        }
        return count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    }

    /// Shuts the reading side of each connection a worker reads past its request's
    /// deadline: the worker's read returns at once, and the body counts as incomplete.
    private func endExpiredReads() {
        let now = ContinuousClock.now
        state.withLock { state in
            for (fd, deadline) in state.reading where deadline <= now {
                shutdown(fd, Int32(SHUT_RD))
                // Shut once; the duplicate stays open until the worker lets go of it.
                state.reading[fd] = nil
            }
        }
    }

    enum RequestState: Equatable { case complete, parametersComplete, partial, garbage }

    /// Walks FastCGI record headers (version 1; type; request id; content length;
    /// padding). A request is a BEGIN_REQUEST (responder role), its PARAMS up to the empty
    /// record, then its STDIN up to the empty record, all with the request's id; any other
    /// record in their place is garbage (nginx sends nothing else).
    static func requestState(_ bytes: ArraySlice<UInt8>) -> RequestState {
        let beginRequest: UInt8 = 1
        let params: UInt8 = 4
        let stdin: UInt8 = 5
        var requestID: Int?
        var parametersEnded = false
        var offset = bytes.startIndex
        while bytes.endIndex - offset >= 8 {
            guard bytes[offset] == 1 else { return .garbage }
            let type = bytes[offset + 1]
            let id = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            let length = Int(bytes[offset + 4]) << 8 | Int(bytes[offset + 5])
            let padding = Int(bytes[offset + 6])
            switch type {
            case beginRequest:
                guard requestID == nil, id != 0, length == 8 else { return .garbage }
                // The role (two bytes) is checked once the body is there: 1, responder.
                if bytes.endIndex - offset >= 10, bytes[offset + 8] != 0 || bytes[offset + 9] != 1 {
                    return .garbage
                }
                requestID = id
            case params:
                guard id == requestID, !parametersEnded else { return .garbage }
                if length == 0 { parametersEnded = true }
            case stdin:
                guard id == requestID, parametersEnded else { return .garbage }
                if length == 0 { return .complete }
            default:
                return .garbage
            }
            offset += 8 + length + padding
        }
        return parametersEnded ? .parametersComplete : .partial
    }

    private func shutDown(closing watched: [Watched]) {
        for entry in watched {
            shutdown(entry.fd, Int32(SHUT_RDWR))
            close(entry.fd)
        }
        let leftovers = state.withLock { state in
            state.stopping = true
            state.listenerSetAside = false
            state.finished = true
            defer { state.returned = [] }
            return state.returned
        }
        available.signal()
        for (fd, _) in leftovers {
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
        }
    }

    deinit {
        close(wake.read)
        close(wake.write)
    }
}
