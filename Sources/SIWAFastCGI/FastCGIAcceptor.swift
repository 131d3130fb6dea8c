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

/// Hands a connection to a worker only once its request is waiting in the socket, whole,
/// so that no peer allowed on the socket can take a worker away from Apple and `/healthz`.
///
/// Who does what: an idle worker accepts a new connection itself (the workers wait in one
/// epoll on the listener, one-shot, and on `readyPipe`) and looks at it once: a request
/// already whole (nginx writes it as soon as it has connected: nearly always) is served by
/// that worker at once, with no hop to another thread. Anything else goes to the poll
/// thread, which watches it by the same rules (`look(at:)`), and so do kept connections
/// and those to drain. Only an idle worker accepts: while every worker is busy, new
/// connections wait in the kernel's listen backlog, at no descriptor's cost.
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
///   Without room the listener is left disarmed (new connections wait in the backlog);
///   whoever makes room (the poll thread, a worker taking a connection) arms it again.
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

    /// What the workers give the poll thread.
    private enum Returned {
        /// A kept connection, to watch for its next request.
        case kept(Int32)
        /// A connection answered with input left unread, to drain and close.
        case draining(Int32)
        /// A new connection a worker accepted whose request was not whole at its first look.
        case fresh(Watched)
    }

    private struct State {
        /// Connections the poll thread found whole, for the workers.
        var ready: [Handed] = []
        var returned: [Returned] = []
        /// New connections among `returned`, not watched yet: they count against `watchLimit`.
        var freshReturned = 0
        /// New connections a worker has accepted and is looking at: they may be given to
        /// the poll thread, so they count against `watchLimit` too.
        var beingLookedAt = 0
        /// Connections watched, as the poll thread last counted them (and its closes to come).
        var watchedCount = 0
        /// How many of the watched may be closed to make room (looked at, waiting `roomGrace`).
        var mayMakeRoomCount = 0
        /// Watched connections to close to make room, the oldest that may go first, as soon
        /// as they may: one per connection accepted while the watched filled `watchLimit`.
        var roomWanted = 0
        /// A worker's accept found no descriptor left: if none can be closed, accepting pauses.
        var descriptorShortage = false
        var acceptingPausedUntil: ContinuousClock.Instant?
        /// The listener is armed in the workers' epoll (one-shot): the next connection wakes
        /// one idle worker, which accepts it and arms it again if there is room.
        var listenerArmed = true
        /// The listener was shut down (a stop): never armed again.
        var listenerClosed = false
        var stopping = false
        var finished = false

        /// Room for one more connection: fewer whole requests waiting for a worker than
        /// `capacity`, and fewer watched than `watchLimit` or one of them may go (beyond
        /// those already wanted to make room).
        func hasRoom(capacity: Int, watchLimit: Int, now: ContinuousClock.Instant) -> Bool {
            !stopping && !listenerClosed && (acceptingPausedUntil.map { now >= $0 } ?? true)
                && ready.count < capacity
                && (watchedCount + freshReturned + beingLookedAt < watchLimit || mayMakeRoomCount > roomWanted)
        }
    }

    private let state = Mutex(State())
    /// The workers' epoll: the listener (one-shot) and `readyPipe`'s reading end.
    private let workerEvents: Int32
    /// One byte per connection made ready, and one at the end (each worker that finds
    /// nothing left passes that one on); a worker checks `state`, so a spare byte costs one check.
    private let readyPipe: (read: Int32, write: Int32)
    private let wake: (read: Int32, write: Int32)
    private static let listenerToken: UInt64 = 1
    private static let readyToken: UInt64 = 2

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
        // Made in locals, and the properties set only once all of them exist: an init that
        // throws after every property is set runs deinit, which would close them a second
        // time (numbers another thread may have been given meanwhile).
        let wake = try FastCGILibrary.makePipe()
        let readyPipe: (read: Int32, write: Int32)
        do throws(FastCGIError) {
            readyPipe = try FastCGILibrary.makePipe()
        } catch {
            close(wake.read)
            close(wake.write)
            throw error
        }
        let workerEvents = siwa_epoll_create()
        guard workerEvents >= 0,
            siwa_epoll_add(workerEvents, listenFD, Self.listenerToken, 1) == 0,
            siwa_epoll_add(workerEvents, readyPipe.read, Self.readyToken, 0) == 0
        else {
            let code = errno
            for end in [wake.read, wake.write, readyPipe.read, readyPipe.write, workerEvents] where end >= 0 {
                close(end)
            }
            throw .system(.listenFailed, "epoll", errno: code)
        }
        self.wake = wake
        self.readyPipe = readyPipe
        self.workerEvents = workerEvents
        _ = fcntl(listenFD, F_SETFL, fcntl(listenFD, F_GETFL) | O_NONBLOCK)
        for end in [wake.read, wake.write, readyPipe.read, readyPipe.write] {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
        }
    }

    /// Connections the workers gave to the poll thread that it has not taken yet.
    var returnedCount: Int { state.withLock { $0.returned.count } }

    /// Connections the acceptor holds and watches (counted against `watchLimit`): watched by
    /// the poll thread, given back to it by a worker, or being looked at by a worker.
    var heldConnectionCount: Int {
        state.withLock { $0.watchedCount + $0.freshReturned + $0.beingLookedAt }
    }

    /// No room for another connection: new ones wait in the listen backlog.
    var listenerIsSetAside: Bool {
        state.withLock {
            !$0.stopping && !$0.listenerClosed && !$0.hasRoom(capacity: capacity, watchLimit: watchLimit, now: .now)
        }
    }

    /// The next connection whose request is waiting, for an idle worker: one the poll
    /// thread found whole, or a new one this worker accepts and finds whole at its first
    /// look (nginx writes its request as soon as it has connected), with no hop through
    /// the poll thread. A new one not whole yet goes to the poll thread to be watched; one
    /// that is refused is closed here, as the poll thread would. nil once stopping and none
    /// is left. `buffer` is the worker's own, `window` bytes.
    func next(buffer: inout [UInt8]) -> Handed? {
        while true {
            let (handed, finished) = state.withLock { state -> (Handed?, Bool) in
                guard !state.ready.isEmpty else { return (nil, state.finished) }
                return (state.ready.removeFirst(), false)
            }
            if let handed {
                // One fewer waiting: below `capacity` again, the listener may be armed.
                armListenerIfRoom()
                return handed
            }
            if finished {
                signalReady(1)
                return nil
            }
            var token: UInt64 = 0
            guard siwa_epoll_wait_one(workerEvents, -1, &token) == 1 else { continue }  // EINTR
            if token == Self.readyToken {
                var byte: UInt8 = 0
                _ = read(readyPipe.read, &byte, 1)
                continue
            }
            if let handed = acceptOne(buffer: &buffer) { return handed }
        }
    }

    /// The listener was reported (and so disarmed): accepts one connection, arms the
    /// listener again if there is room, and looks at the connection once.
    private func acceptOne(buffer: inout [UInt8]) -> Handed? {
        // Non-blocking (a worker's read never waits for a byte) and closed on exec.
        let fd = siwa_accept4(listenFD, Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue))
        let code = errno
        let now = ContinuousClock.now
        let (arm, wakePoller) = state.withLock { state -> (Bool, Bool) in
            state.listenerArmed = false
            var wakePoller = false
            if fd < 0 {
                if Self.isDescriptorShortage(code) {
                    // The oldest watched that may go is closed, or accepting pauses.
                    state.descriptorShortage = true
                    return (false, true)
                }
                guard code == EAGAIN || code == EWOULDBLOCK || code == EINTR || code == ECONNABORTED else {
                    // Another error (a network error accept(2) passes on, a security module's
                    // refusal, the listener shut down by a stop): retried after a pause, not
                    // at once, and never given up (a stop closes the listener for good).
                    state.acceptingPausedUntil = now.advanced(by: Self.descriptorShortagePause)
                    return (false, true)
                }
            } else {
                if state.watchedCount + state.freshReturned + state.beingLookedAt >= watchLimit {
                    // Full: the one watched longest goes, once it may (as this one may wait there).
                    state.roomWanted += 1
                    wakePoller = true
                }
                state.beingLookedAt += 1
            }
            guard state.hasRoom(capacity: capacity, watchLimit: watchLimit, now: now) else {
                return (false, wakePoller)
            }
            state.listenerArmed = true
            return (true, wakePoller)
        }
        if arm { _ = siwa_epoll_rearm(workerEvents, listenFD, Self.listenerToken) }
        if wakePoller { wakePollThread() }
        guard fd >= 0 else { return nil }
        var entry = Watched(
            fd: fd, since: now, deadline: now.advanced(by: requestTimeout), idle: false, nextLook: now)
        var outcome = look(at: &entry, revents: 0, now: now, buffer: &buffer)
        if case .keep = outcome, entry.peeked < 0 {
            // Accepted before nginx wrote its request (it writes just after its connect):
            // the core is given up once, so that it can, and the connection looked at again.
            // Still nothing: the poll thread watches it; no worker waits for it.
            sched_yield()
            outcome = look(at: &entry, revents: 0, now: ContinuousClock.now, buffer: &buffer)
        }
        switch outcome {
        case .handOn(let handed):
            state.withLock { $0.beingLookedAt -= 1 }
            return handed
        case .closed:
            state.withLock { $0.beingLookedAt -= 1 }
            return nil
        case .keep:
            giveBack(.fresh(entry))
            return nil
        }
    }

    /// A stop: the listener is never armed again (`FastCGIServer.requestStop`, before it
    /// shuts the listening socket down, which would otherwise be reported for ever).
    func closeListener() {
        state.withLock { $0.listenerClosed = true }
    }

    /// Arms the listener when it is not armed and there is room (the poll thread after each
    /// pass, a worker after taking a connection).
    private func armListenerIfRoom() {
        let now = ContinuousClock.now
        let arm = state.withLock { state -> Bool in
            if let paused = state.acceptingPausedUntil, now >= paused { state.acceptingPausedUntil = nil }
            guard !state.listenerArmed, state.hasRoom(capacity: capacity, watchLimit: watchLimit, now: now) else {
                return false
            }
            state.listenerArmed = true
            return true
        }
        if arm { _ = siwa_epoll_rearm(workerEvents, listenFD, Self.listenerToken) }
    }

    /// Wakes `count` workers for connections made ready (or the end).
    private func signalReady(_ count: Int) {
        guard count > 0 else { return }
        var bytes = [UInt8](repeating: 1, count: count)
        _ = write(readyPipe.write, &bytes, count)
    }

    /// A kept connection (nginx's `fastcgi_keep_conn`) goes back to be watched for its
    /// next request; when stopping it is closed instead.
    func watchAgain(_ fd: Int32) { giveBack(.kept(fd)) }

    /// A connection answered with input left unread: its writing side is already shut;
    /// it is drained here, bounded, then closed.
    func drainAndClose(_ fd: Int32) { giveBack(.draining(fd)) }

    private func giveBack(_ returned: Returned) {
        state.withLock { state in
            if case .fresh = returned { state.beingLookedAt -= 1 }
            guard !state.stopping else {
                let fd: Int32
                switch returned {
                case .kept(let kept), .draining(let kept): fd = kept
                case .fresh(let entry): fd = entry.fd
                }
                shutdown(fd, Int32(SHUT_RDWR))
                close(fd)
                return
            }
            if case .fresh = returned { state.freshReturned += 1 }
            state.returned.append(returned)
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
        var stopping = false
        while !stopping || !watched.isEmpty {
            var now = ContinuousClock.now
            makeRoom(in: &watched, now: now)
            now = ContinuousClock.now
            let cutoff = now - roomGrace
            let mayMakeRoom = watched.reduce(0) { $0 + ($1.mayMakeRoom(waitingSince: cutoff) ? 1 : 0) }
            let (pausedUntil, setAside) = state.withLock { state in
                state.watchedCount = watched.count
                state.mayMakeRoomCount = mayMakeRoom
                if let paused = state.acceptingPausedUntil, now >= paused { state.acceptingPausedUntil = nil }
                return (
                    state.acceptingPausedUntil,
                    !state.stopping && !state.hasRoom(capacity: capacity, watchLimit: watchLimit, now: now)
                )
            }
            armListenerIfRoom()
            var fds: [pollfd] = [
                pollfd(fd: stopping ? -1 : stopFD, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
            ]
            fds.reserveCapacity(2 + watched.count + draining.count)
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
            if let pausedUntil { due(pausedUntil) }
            // Full, with connections too young to be closed to make room: look again when
            // the oldest of them may go.
            if setAside, let roomAt = watched.filter(\.examined).map(\.since).min()?.advanced(by: roomGrace),
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
                state.withLock { $0.listenerClosed = true }
                // What workers gave back before the stop: a begun request among it is
                // finished too, as one watched here already is.
                takeReturned(into: &watched, draining: &draining, stopping: true)
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
            var events: [Int32: Int16] = [:]
            for entry in fds.dropFirst(2) where entry.revents != 0 { events[entry.fd] = entry.revents }
            examine(&watched, events: events, buffer: &peekBuffer)
            drain(&draining, events: events, buffer: &peekBuffer)
        }
        shutDown(closing: watched.map(\.fd) + draining.map(\.fd))
    }

    /// Closes the watched connections the workers asked room for (one per connection they
    /// accepted while the watched filled `watchLimit`), the one watched longest first, of
    /// those that may go; those that may not go yet are closed at a later pass, once they
    /// may. At an accept that found no descriptor left: one more, or, with none to close,
    /// accepting pauses for `descriptorShortagePause`.
    private func makeRoom(in watched: inout [Watched], now: ContinuousClock.Instant) {
        // `fresh`: connections the workers gave that the pass takes after this one, and those
        // a worker is still looking at; they are watched as much as those already here.
        let (wanted, shortage, fresh) = state.withLock { state in
            defer { state.descriptorShortage = false }
            return (state.roomWanted, state.descriptorShortage, state.freshReturned + state.beingLookedAt)
        }
        var closed = 0
        // Wanted only while the watched fill the limit: ones that left by themselves made room too.
        while closed < wanted && watched.count + fresh >= watchLimit || shortage && closed == 0,
            let oldest = Self.longestWatched(watched, waitingSince: now - roomGrace)
        {
            shutdown(watched[oldest].fd, Int32(SHUT_RDWR))
            close(watched[oldest].fd)
            watched.remove(at: oldest)
            closed += 1
        }
        let fulfilled = watched.count + fresh < watchLimit ? wanted : min(closed, wanted)
        state.withLock { state in
            state.roomWanted -= fulfilled
            if shortage && closed == 0 { state.acceptingPausedUntil = now.advanced(by: Self.descriptorShortagePause) }
        }
    }

    private func takeReturned(into watched: inout [Watched], draining: inout [Draining], stopping: Bool) {
        var byte = [UInt8](repeating: 0, count: 64)
        while read(wake.read, &byte, byte.count) > 0 {}
        let returned = state.withLock { state in
            defer {
                state.returned = []
                state.freshReturned = 0
            }
            // Counted as watched from now on (the next pass counts again).
            state.watchedCount += state.freshReturned
            return state.returned
        }
        let now = ContinuousClock.now
        for item in returned {
            switch item {
            case .kept(let fd) where stopping, .draining(let fd) where stopping:
                // No next request is taken once stopping; an answer is already written.
                shutdown(fd, Int32(SHUT_RDWR))
                close(fd)
            case .fresh(let entry) where stopping && !entry.parametersComplete:
                // Not begun (its parameters are not all here): closed, as watched ones are.
                shutdown(entry.fd, Int32(SHUT_RDWR))
                close(entry.fd)
            case .draining(let fd):
                // Its own budget: when it is full, the one drained longest is closed (its
                // answer is written already).
                if draining.count >= drainLimit {
                    close(draining.removeFirst().fd)
                }
                draining.append(Draining(fd: fd, deadline: now.advanced(by: Self.drainTime), left: Self.drainBytes))
            case .kept(let fd):
                watched.append(
                    Watched(
                        fd: fd, since: now, deadline: now.advanced(by: requestTimeout), idle: true, nextLook: now,
                        givenBack: true))
            case .fresh(let entry):
                watched.append(entry)
            }
        }
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
            switch look(at: &entry, revents: revents, now: now, buffer: &buffer) {
            case .handOn(let connection): handed.append(connection)
            case .closed: break
            case .keep: kept.append(entry)
            }
        }
        watched = kept
        handOn(handed)
    }

    /// What one look at a connection decided.
    private enum Look {
        /// Its request is whole (or answerable without waiting): for a worker.
        case handOn(Handed)
        /// Closed: dead, malformed, refused, over-large or expired.
        case closed
        /// Watched on.
        case keep
    }

    /// Peeks at one connection (a worker at a new one it accepted, the poll thread at a
    /// watched one) and decides, by the same rules in both places.
    private func look(
        at entry: inout Watched, revents: Int16, now: ContinuousClock.Instant, buffer: inout [UInt8]
    ) -> Look {
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
                return .closed
            }
            switch inspection.parameters {
            case .success(let parameters): entry.parameters = parameters
            case .failure(let refusal):
                // Parameters nginx never sends: no worker ever sees them. Reported
                // before the close, so the report is there when the peer sees it.
                onRefusal(refusal)
                close(entry.fd)
                return .closed
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
                return .closed
            }
            switch (inspection.state, entry.parameters) {
            case (.complete, let parameters?):
                return .handOn(Handed(fd: entry.fd, parameters: parameters))
            case (.parametersComplete, let parameters?) where bodyOverLimit || hungUp:
                // Over the limit (the worker reads nothing it must wait for: at most
                // the limit and one byte, already here), or a peer that has said all it
                // will (the worker reads to the end at once): answered without waiting.
                return .handOn(Handed(fd: entry.fd, parameters: parameters))
            case (.partial, _) where hungUp:
                close(entry.fd)  // cut short: never a request
                return .closed
            case _ where peeked >= window:
                // More than the largest allowed request, and none a worker can answer at once.
                onRefusal(.requestOverBuffer)
                close(entry.fd)
                return .closed
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
            return .closed
        }
        if entry.deadline <= now {
            close(entry.fd)  // a silent or slow peer, or an idle kept connection: it never had a worker
            return .closed
        }
        return .keep
    }

    /// Queues connections whose request a worker can answer without waiting, and wakes as
    /// many workers. Each is non-blocking, as `accept4` made it.
    func handOn(_ handed: [Handed]) {
        guard !handed.isEmpty else { return }
        state.withLock { $0.ready += handed }
        signalReady(handed.count)
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
            state.listenerClosed = true
            state.finished = true
            defer {
                state.returned = []
                state.freshReturned = 0
            }
            return state.returned
        }
        signalReady(1)
        for item in leftovers {
            switch item {
            case .kept(let fd), .draining(let fd):
                shutdown(fd, Int32(SHUT_RDWR))
                close(fd)
            case .fresh(let entry):
                shutdown(entry.fd, Int32(SHUT_RDWR))
                close(entry.fd)
            }
        }
    }

    deinit {
        for end in [wake.read, wake.write, readyPipe.read, readyPipe.write, workerEvents] { close(end) }
    }
}
