import CSocketShim
import Foundation
import Glibc
import Synchronization

/// Why the acceptor closed a connection that had begun a request, without a worker: the
/// server's owner logs it.
public enum FastCGIRefusal: String, Sendable, Error, CaseIterable {
    /// More bytes than the largest allowed request (the body limit, plus
    /// `FastCGIAcceptor.requestAllowance` for the parameters and every record's header and
    /// padding) arrived without making a request a worker can answer without waiting.
    case requestOverBuffer = "request_over_buffer"
    /// A parameter name sent twice (not an `HTTP_*` one, which nginx may repeat).
    case duplicateParameter = "duplicate_parameter"
    /// A parameter name with a control byte (NUL to 0x1F, DEL) or `=`.
    case invalidParameterName = "invalid_parameter_name"
    /// A `CONTENT_LENGTH` that is neither empty nor a decimal number of at most 18 significant digits.
    case invalidContentLength = "invalid_content_length"
    /// The parameters end in the middle of a name-value pair.
    case malformedParameters = "malformed_parameters"
    /// A kept connection's next request arrived while the peer had not read all of the
    /// last answer (nginx reads an answer to its end before it sends another request): the
    /// next answer could fill the socket, and a worker writing it would wait for a peer
    /// that never reads.
    case answerUnread = "answer_unread"
    /// A request in more than `FastCGIAcceptor.recordLimit` records: nginx sends a few
    /// dozen at most, and each look at a connection walks every record it has sent.
    case tooManyRecords = "too_many_records"
}

/// Accepts connections on one thread and hands a connection to a worker only once its
/// request is waiting in the socket, whole, so that no peer allowed on the socket can take
/// a worker away from Apple and `/healthz`.
///
/// Why: libfcgi's `FCGX_Accept_r` reads the begin record and the parameters itself, with
/// no timeout, and reads the body with only a per-read timeout, so a peer that sent one
/// byte and then nothing, or trickled its body a byte at a time, or sent all but the end
/// of its body, held a worker for as long as it liked (or until the request's deadline).
/// Here:
/// - a new connection, and a kept connection that a worker hands back, is watched with
///   poll(2) and peeked at (`MSG_PEEK`, nothing is consumed) until its whole request is
///   there: a BEGIN_REQUEST, its PARAMS up to the empty record, and its STDIN up to the
///   empty record, all of the same request id. Anything else in that place (a PARAMS
///   record without a BEGIN_REQUEST, another request id, another record type) closes
///   the connection without a worker. The peek window holds the largest allowed request:
///   the body limit plus `requestAllowance` (64 KiB) for the parameters and the records'
///   headers and padding. Besides a whole request, a worker is handed only one it can
///   answer 413 without waiting for a byte: parameters complete and declaring a body over
///   the limit, or more body bytes already there than the limit. A window filled by
///   anything else is refused here (closed, and reported once as `requestOverBuffer`).
/// - the parameters are read here, once, as soon as they are complete
///   (`FastCGIParameters.init(reading:)`), and handed to the worker with the connection:
///   the length that decides "answer at once" is the length the worker goes by. Parameters
///   nginx never sends (a name twice, a name with a control byte, a length that is not
///   a decimal number, a pair cut short) close the connection here, reported once each.
/// - one deadline per request (`requestTimeout` from the connection's accept, or from
///   the first byte of a kept connection's next request): at the deadline a connection
///   still watched is closed unanswered (a worker never waited for it).
/// - a worker waits for no byte: every byte it reads is in the socket when it is handed
///   the connection, and every connection is non-blocking from its accept (`accept4`,
///   `SOCK_NONBLOCK`), so a read of a byte that is not there fails at once (the body
///   counts as incomplete), whatever was decided here.
/// - a kept connection (`FCGI_KEEP_CONN`) waits idle for its next request at most
///   `requestTimeout` too, and its next request is handed on only once the peer has read
///   all of the last answer (`answerUnread` otherwise): a worker's write never waits
///   behind answers a peer leaves unread.
/// - a connection answered with input left unread is drained here (at most
///   `drainBytes` or `drainTime`), then closed: no worker lingers on it. Draining
///   connections have a budget of their own (`drainLimit`, the oldest closed first when it
///   is full): they never take room from new connections.
/// - connections whose request is whole and waits for a worker are bounded (`capacity`,
///   four per worker and at least 16): beyond it new connections wait in the kernel's
///   listen backlog, which holds genuine work at no descriptor's cost.
/// - connections still sending (or silent) cost a descriptor each and may be many:
///   `watchLimit`, from the process's descriptor limit (kept below 1024, the most
///   libfcgi's `select` can watch) less a reserve for the rest of the process. When they
///   fill it, the one watched longest is closed to make room (once it has waited
///   `roomGrace`: a peer still writing the request it has just connected for is never
///   closed; nor is one whose request has come in whole, which is handed on first);
///   accept(2) failing for want of descriptors (EMFILE, ENFILE) closes the oldest of them
///   too, or, with none to close, pauses accepting for a moment instead of retrying at once.
///   A worker taking a connection while the listener is set aside wakes the poll thread at
///   once, so accepting resumes as soon as there is room, not at the next poll timeout.
final class FastCGIAcceptor: Sendable {
    /// A connection waiting here for its request (or, kept, for its next one).
    private struct Watched {
        let fd: Int32
        /// When it began waiting here: the one waiting longest makes room first.
        let since: ContinuousClock.Instant
        var deadline: ContinuousClock.Instant
        /// A kept connection without a byte of its next request yet.
        var idle: Bool
        /// Bytes seen at the last peek (-1: none yet).
        var peeked = -1
        /// Peeked at least once: a connection not yet looked at is never closed to make room.
        var examined = false
        /// Its parameters have arrived whole: at a stop, it is watched on until its body ends.
        var parametersComplete = false
        /// Its parameters, read once when they were complete (never read again at a later look).
        var parameters: FastCGIParameters?
        /// When an incomplete connection whose bytes sit unread is peeked at again (its unread
        /// bytes keep poll(2) from telling when more arrive), and how long it waits after a
        /// look that found nothing new: from 20 ms, doubling to 320 ms, so that hundreds of
        /// silent peers cost a few thousand peeks a second, not a core.
        var nextLook: ContinuousClock.Instant
        var lookInterval: Duration = .milliseconds(20)
        /// A kept connection a worker gave back: it has answers written, which the peer must
        /// have read before its next request is handed on. A new one has none.
        var givenBack = false

        /// Closed to make room only once looked at and waiting here since `cutoff` or
        /// before (`roomGrace` ago): never a connection whose peer is still writing the
        /// request it has just connected for.
        func mayMakeRoom(waitingSince cutoff: ContinuousClock.Instant) -> Bool {
            examined && since <= cutoff
        }
    }

    /// A connection answered with input left unread, drained here before it is closed.
    private struct Draining {
        let fd: Int32
        let deadline: ContinuousClock.Instant
        var left: Int
    }

    /// A connection handed to the workers, and its request's parameters as read here.
    struct Handed {
        let fd: Int32
        let parameters: FastCGIParameters
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
    /// The body limit: a request declaring more, or with more already there, is handed on
    /// to be answered 413 without waiting.
    private let maximumBodyBytes: Int
    /// The peek window: the largest allowed request, records and parameters included.
    let window: Int
    /// Connections whose request is whole and waits for a worker, at most.
    let capacity: Int
    /// Connections watched for their request (or kept, for their next one), at most.
    let watchLimit: Int
    /// Connections being drained before they are closed, at most.
    let drainLimit: Int
    private let onRefusal: @Sendable (FastCGIRefusal) -> Void
    /// Room in the peek window beyond the body limit: the parameters (nginx's are a few KiB)
    /// and every record's header and padding.
    static let requestAllowance = 64 * 1024
    /// Unread input a closing connection may still send, and for how long, before it is closed.
    static let drainBytes = 64 * 1024
    static let drainTime: Duration = .seconds(2)
    /// The default `idlePollTimeout`.
    static let defaultIdlePollTimeout: Duration = .seconds(1)
    /// How long a connection waits here at least before it may be closed to make room:
    /// nginx writes its request as soon as it has connected (microseconds; milliseconds on
    /// a loaded machine), an idle or silent peer waits far longer.
    static let defaultRoomGrace: Duration = .milliseconds(250)
    /// How long accepting pauses after accept(2) found no descriptor left and none to close.
    static let descriptorShortagePause: Duration = .milliseconds(250)
    /// The most descriptors libfcgi can use (`select`'s FD_SETSIZE): the unit's LimitNOFILE.
    static let descriptorCeiling = 1024
    /// The longest wait between two looks at a connection whose unread bytes sit in the socket.
    static let longestLookInterval: Duration = .milliseconds(320)
    /// The shortest wait for the next look: looks due within it are made together.
    static let lookBatch: Duration = .milliseconds(10)

    /// POLLRDHUP (Linux): the peer shut its writing side. Glibc hides the name behind _GNU_SOURCE.
    private static let pollReadHangUp: Int16 = 0x2000

    private struct State {
        /// Connections whose request is waiting, for the workers.
        var ready: [Handed] = []
        /// Connections the workers gave back, for the poll thread: kept ones (false) and
        /// ones to drain and close (true).
        var returned: [(fd: Int32, draining: Bool)] = []
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

    /// `watchLimit`, unless given: the descriptors the process may open (at most
    /// `descriptorCeiling`), less a reserve for everything else it holds: 128, four per
    /// worker, and the connections waiting for a worker or being drained. At least `capacity`.
    init(
        listenFD: Int32, stopFD: Int32, requestTimeout: Duration, workerCount: Int, maximumBodyBytes: Int,
        idlePollTimeout: Duration = defaultIdlePollTimeout, roomGrace: Duration = defaultRoomGrace,
        watchLimit: Int? = nil, onRefusal: @escaping @Sendable (FastCGIRefusal) -> Void = { _ in }
    ) throws(FastCGIError) {
        self.listenFD = listenFD
        self.stopFD = stopFD
        self.requestTimeout = requestTimeout
        self.idlePollTimeout = idlePollTimeout
        self.roomGrace = roomGrace
        self.maximumBodyBytes = maximumBodyBytes
        self.window = maximumBodyBytes + Self.requestAllowance
        self.onRefusal = onRefusal
        let capacity = max(16, 4 * workerCount)
        self.capacity = capacity
        self.drainLimit = capacity
        var limit = rlimit()
        let descriptors =
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0
            ? min(Self.descriptorCeiling, Int(clamping: limit.rlim_cur)) : Self.descriptorCeiling
        self.watchLimit = watchLimit ?? max(capacity, descriptors - 128 - 4 * workerCount - 2 * capacity)
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

    /// The poll loop, until `stopFD` is readable. Then accepting ends, connections without
    /// a request's parameters (silent, idle kept, draining) are closed, and those part way
    /// through a request's body are watched on until it is whole (handed on, and finished by a
    /// worker) or its deadline; then it returns. Those already complete stay queued for
    /// the workers, which finish them.
    func run() {
        // The connections waiting for their request, and those being drained: the poll
        // thread's own lists.
        var watched: [Watched] = []
        var draining: [Draining] = []
        // Where peeks land: made once (zeroing the window on every pass was a visible cost).
        var peekBuffer = [UInt8](repeating: 0, count: window)
        var acceptingFrom = ContinuousClock.now
        var stopping = false
        while !stopping || !watched.isEmpty {
            let now = ContinuousClock.now
            let pausedForDescriptors = now < acceptingFrom
            let listening = state.withLock { state in
                let room = mayAccept(watched: watched, waiting: state.ready.count, now: now)
                // Set under the same lock as the count it was judged on: a worker taking a
                // connection after this wakes the poll below.
                state.listenerSetAside = !room
                return room && !pausedForDescriptors && !stopping
            }
            var fds: [pollfd] = [
                pollfd(fd: stopping ? -1 : stopFD, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
                pollfd(fd: listening ? listenFD : -1, events: Int16(POLLIN), revents: 0),
            ]
            fds.reserveCapacity(3 + watched.count + draining.count)
            // A connection already peeked and still incomplete is looked at again on its own
            // schedule (its unread bytes would make poll return at once, for ever).
            var soonest: ContinuousClock.Instant?
            func due(_ instant: ContinuousClock.Instant) { soonest = min(soonest ?? instant, instant) }
            // Looks are gathered: the poll waits at least `lookBatch` for the next one, so
            // hundreds of peers on their own schedules wake it at most 100 times a second.
            var soonestLook: ContinuousClock.Instant?
            for entry in watched {
                let peekedBefore = entry.peeked > 0
                if peekedBefore { soonestLook = min(soonestLook ?? entry.nextLook, entry.nextLook) }
                due(entry.deadline)
                fds.append(pollfd(fd: entry.fd, events: peekedBefore ? Self.pollReadHangUp : Int16(POLLIN), revents: 0))
            }
            for entry in draining {
                due(entry.deadline)
                fds.append(pollfd(fd: entry.fd, events: Int16(POLLIN), revents: 0))
            }
            if let soonestLook { due(max(soonestLook, now.advanced(by: Self.lookBatch))) }
            if pausedForDescriptors { due(acceptingFrom) }
            // Full, with connections too young to be closed to make room: look again when
            // the oldest of them may go.
            if !listening, let roomAt = watched.filter(\.examined).map(\.since).min()?.advanced(by: roomGrace),
                roomAt > now
            {
                due(roomAt)
            }
            let idleMilliseconds = Int32(clamping: Int((idlePollTimeout / .milliseconds(1)).rounded(.up)))
            var timeout = idleMilliseconds
            if let soonest {
                let milliseconds = (now.duration(to: soonest) / .milliseconds(1)).rounded(.up)
                timeout = min(timeout, Int32(max(0, min(Double(idleMilliseconds), milliseconds))))
            }
            let count = poll(&fds, nfds_t(fds.count), timeout)
            if count < 0 && errno != EINTR { break }
            if fds[0].revents != 0 {
                stopping = true
                let (begun, rest) = (
                    watched.filter { $0.parametersComplete && !$0.idle },
                    watched.filter { !$0.parametersComplete || $0.idle }
                )
                for fd in rest.map(\.fd) + draining.map(\.fd) {
                    shutdown(fd, Int32(SHUT_RDWR))
                    close(fd)
                }
                watched = begun
                draining = []
                continue
            }
            if fds[1].revents != 0 { takeReturned(into: &watched, draining: &draining, stopping: stopping) }
            // Examined before accepting: a request that has just come in whole is handed on,
            // never closed to make room for a newer connection.
            var events: [Int32: Int16] = [:]
            for entry in fds.dropFirst(3) where entry.revents != 0 { events[entry.fd] = entry.revents }
            examine(&watched, events: events, buffer: &peekBuffer)
            drain(&draining, events: events, buffer: &peekBuffer)
            if fds[2].revents != 0 {
                // Counted again: examining handed connections on to the workers.
                let waitingNow = state.withLock { $0.ready.count }
                let before = watched.count
                if !acceptWaiting(into: &watched, waiting: waitingNow) {
                    acceptingFrom = ContinuousClock.now.advanced(by: Self.descriptorShortagePause)
                }
                // nginx writes its request as soon as it has connected: it is usually whole
                // by now, and handed on in this pass rather than after one more poll.
                if watched.count > before { examine(&watched, events: [:], buffer: &peekBuffer) }
            }
        }
        shutDown(closing: watched.map(\.fd) + draining.map(\.fd))
    }

    /// Room for one more connection: fewer whole requests waiting for a worker than
    /// `capacity` (beyond it the backlog holds them), and fewer watched connections than
    /// `watchLimit` or one of them may go.
    private func mayAccept(watched: [Watched], waiting: Int, now: ContinuousClock.Instant) -> Bool {
        waiting < capacity
            && (watched.count < watchLimit || watched.contains { $0.mayMakeRoom(waitingSince: now - roomGrace) })
    }

    private func takeReturned(into watched: inout [Watched], draining: inout [Draining], stopping: Bool) {
        var byte = [UInt8](repeating: 0, count: 64)
        while read(wake.read, &byte, byte.count) > 0 {}
        let returned = state.withLock { state in
            defer { state.returned = [] }
            return state.returned
        }
        let now = ContinuousClock.now
        for (fd, drains) in returned {
            if stopping {
                // No next request is taken once stopping; an answer is already written.
                shutdown(fd, Int32(SHUT_RDWR))
                close(fd)
            } else if drains {
                // Its own budget: when it is full, the one drained longest is closed (its
                // answer is written already).
                if draining.count >= drainLimit {
                    close(draining.removeFirst().fd)
                }
                draining.append(Draining(fd: fd, deadline: now.advanced(by: Self.drainTime), left: Self.drainBytes))
            } else {
                watched.append(
                    Watched(
                        fd: fd, since: now, deadline: now.advanced(by: requestTimeout), idle: true, nextLook: now,
                        givenBack: true))
            }
        }
    }

    /// Accepts what the listen backlog holds, within the bounds: at most as many as the
    /// workers' queue has room for (`capacity` less those waiting), so that whole requests
    /// beyond it stay in the backlog, not in descriptors; the next pass looks at these, keeps
    /// the silent ones watched, and accepts again. When the watched ones fill `watchLimit`,
    /// or accept(2) finds no descriptor left, the connection watched longest is closed to
    /// make room. False when accept(2) found no descriptor left and none could be freed:
    /// accepting pauses, the backlog keeps the connections.
    private func acceptWaiting(into watched: inout [Watched], waiting: Int) -> Bool {
        var accepted = 0
        var freedForShortage = false
        while waiting + accepted < capacity {
            // Non-blocking (a worker's read never waits for a byte) and closed on exec.
            let fd = siwa_accept4(listenFD, Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue))
            if fd < 0 {
                let code = errno
                guard Self.isDescriptorShortage(code) else { return true }  // EAGAIN: none left
                // At the descriptor limit: the silent connection waiting longest goes (under
                // the same grace as above), once per pass.
                guard !freedForShortage,
                    let oldest = Self.longestWatched(watched, waitingSince: .now - roomGrace)
                else {
                    return false
                }
                freedForShortage = true
                shutdown(watched[oldest].fd, Int32(SHUT_RDWR))
                close(watched[oldest].fd)
                watched.remove(at: oldest)
                continue
            }
            if watched.count >= watchLimit {
                // Full: the one watched longest goes, if one may (else this one waits in
                // the acceptor beyond the limit until the next pass, which accepts no more).
                if let oldest = Self.longestWatched(watched, waitingSince: .now - roomGrace) {
                    shutdown(watched[oldest].fd, Int32(SHUT_RDWR))
                    close(watched[oldest].fd)
                    watched.remove(at: oldest)
                }
                add(fd, to: &watched)
                return true
            }
            add(fd, to: &watched)
            accepted += 1
        }
        return true
    }

    private func add(_ fd: Int32, to watched: inout [Watched]) {
        let now = ContinuousClock.now
        watched.append(
            Watched(fd: fd, since: now, deadline: now.advanced(by: requestTimeout), idle: false, nextLook: now))
    }

    /// The connection waiting here longest of those that may be closed to make room, if any.
    private static func longestWatched(_ watched: [Watched], waitingSince cutoff: ContinuousClock.Instant) -> Int? {
        // In order of arrival, but for kept connections given back: the first that may go is
        // nearly always at the front.
        var best: Int?
        for index in watched.indices where watched[index].mayMakeRoom(waitingSince: cutoff) {
            if best == nil || watched[index].since < watched[best!].since { best = index }
        }
        return best
    }

    /// Bytes written on `fd` that its peer has not read yet (SIOCOUTQ, the same number as
    /// TIOCOUTQ): on a unix socket, until the peer reads them; on TCP, until they are
    /// acknowledged, which a peer that stops reading stops doing once its window is full.
    static func unreadAnswerBytes(_ fd: Int32) -> Int {
        var queued: Int32 = 0
        return ioctl(fd, UInt(TIOCOUTQ), &queued) == 0 ? Int(queued) : 0
    }

    static func isDescriptorShortage(_ code: Int32) -> Bool {
        code == EMFILE || code == ENFILE || code == ENOBUFS || code == ENOMEM
    }

    /// Peeks at the watched connections that have news (an event, their next look, their
    /// deadline, or never looked at): hands on the ones a worker can answer without
    /// waiting, closes the dead, the malformed, the refused, the over-large and the expired.
    private func examine(_ watched: inout [Watched], events: [Int32: Int16], buffer: inout [UInt8]) {
        let now = ContinuousClock.now
        var kept: [Watched] = []
        kept.reserveCapacity(watched.count)
        var handed: [Handed] = []
        for var entry in watched {
            let revents = events[entry.fd] ?? 0
            guard
                revents != 0 || !entry.examined || entry.nextLook <= now.advanced(by: Self.lookBatch)
                    || entry.deadline <= now
            else {
                kept.append(entry)
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
                let inspection = Self.inspect(buffer[0..<peeked], readingParameters: entry.parameters == nil)
                if inspection.state == .garbage {
                    close(entry.fd)
                    continue
                }
                switch inspection.parameters {
                case .success(let parameters): entry.parameters = parameters
                case .failure(let refusal):
                    // Parameters nginx never sends: no worker ever sees them. Reported
                    // before the close, so the report is there when the peer sees it.
                    onRefusal(refusal)
                    close(entry.fd)
                    continue
                case nil: break
                }
                let bodyOverLimit =
                    (entry.parameters?.contentLength ?? 0) > maximumBodyBytes || inspection.bodyBytes > maximumBodyBytes
                let answerable =
                    inspection.state == .complete
                    || (inspection.state == .parametersComplete && (bodyOverLimit || hungUp))
                if answerable, entry.givenBack, entry.parameters != nil, Self.unreadAnswerBytes(entry.fd) > 0 {
                    // A worker would write its answer behind one the peer has not read:
                    // answers pile up in the socket until a write waits for the peer.
                    onRefusal(.answerUnread)
                    close(entry.fd)
                    continue
                }
                switch (inspection.state, entry.parameters) {
                case (.complete, let parameters?):
                    handed.append(Handed(fd: entry.fd, parameters: parameters))
                    continue
                case (.parametersComplete, let parameters?) where bodyOverLimit || hungUp:
                    // Over the limit (the worker reads nothing it must wait for: at most
                    // the limit and one byte, already here), or a peer that has said all it
                    // will (the worker reads to the end at once): answered without waiting.
                    handed.append(Handed(fd: entry.fd, parameters: parameters))
                    continue
                case (.partial, _) where hungUp:
                    close(entry.fd)  // cut short: never a request
                    continue
                case _ where peeked >= window:
                    // More than the largest allowed request, and none a worker can answer at once.
                    onRefusal(.requestOverBuffer)
                    close(entry.fd)
                    continue
                default:
                    entry.parametersComplete = inspection.state == .parametersComplete
                    if peeked != entry.peeked {
                        entry.lookInterval = .milliseconds(20)
                    } else {
                        entry.lookInterval = min(entry.lookInterval * 2, Self.longestLookInterval)
                    }
                    entry.peeked = peeked
                    entry.nextLook = now.advanced(by: entry.lookInterval)
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
        handOn(handed)
    }

    /// Queues connections whose request a worker can answer without waiting, and wakes as
    /// many workers. Each is non-blocking, as `accept4` made it.
    func handOn(_ handed: [Handed]) {
        guard !handed.isEmpty else { return }
        state.withLock { $0.ready += handed }
        for _ in handed { available.signal() }
    }

    /// Reads and discards what closing connections send; closes each once the peer closed,
    /// on an error, or once its allowance (bytes or time) is used up.
    private func drain(_ draining: inout [Draining], events: [Int32: Int16], buffer: inout [UInt8]) {
        let now = ContinuousClock.now
        var kept: [Draining] = []
        for var entry in draining {
            var done = entry.deadline <= now
            if !done, events[entry.fd] != nil {
                let count = recv(entry.fd, &buffer, min(buffer.count, entry.left), Int32(MSG_DONTWAIT))
                if count > 0 {
                    entry.left -= count
                    done = entry.left <= 0
                } else {
                    done = !(count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                }
            }
            if done { close(entry.fd) } else { kept.append(entry) }
        }
        draining = kept
    }

    private func shutDown(closing descriptors: [Int32]) {
        for fd in descriptors {
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
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
