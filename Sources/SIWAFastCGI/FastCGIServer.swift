import CSocketShim
import Foundation
import Glibc
import SIWASupport
import Synchronization

/// A FastCGI responder over libfcgi: a listening socket, N worker threads each looping
/// accept → handler → finish, and a graceful stop.
///
/// Stopping, and why it works despite libfcgi's blocking accept: `stop()` (or
/// `requestStop()`, from the `ServiceGroup` it runs in) sets a flag, shuts the listening socket down, which makes every
/// accept(2) blocked inside libfcgi return, and makes a pipe readable that idle kept
/// connections are polled with. Requests already accepted run to the end; `run()` and
/// `stop()` wait for them up to a bound, then return regardless. Signals are the
/// group's (`ServiceGroup.handleSignals`), never the server's.
public final class FastCGIServer: Service {
    public typealias Handler = @Sendable (FastCGIRequest) -> FastCGIResponse

    public let configuration: FastCGIServerConfiguration
    private let handler: Handler
    /// The acceptor's longest poll with nothing due (a test sets it long, to prove no
    /// event waits for it).
    private let idlePollTimeout: Duration
    /// How long a connection waits in the acceptor before it may be closed to make room.
    private let roomGrace: Duration
    /// Connections the acceptor watches at most (nil: from the descriptor limit).
    private let watchLimit: Int?
    /// Told of each connection the acceptor refused after it began a request.
    private let onRefusal: @Sendable (FastCGIRefusal) -> Void

    private struct State {
        var started = false
        var stopRequested = false
        var liveWorkers = 0
        var listener: FastCGIListener?
        var acceptor: FastCGIAcceptor?
        var stopPipe: (read: Int32, write: Int32) = (-1, -1)
    }

    private let state = Mutex(State())
    /// Opens once a stop is asked for.
    private let stopAsked = Latch()
    /// Opens once the last worker is out and the socket is closed (or at a stop before a start).
    private let cleanedUp = Latch()

    /// Validates the configuration; nothing is opened until `start()` or `run()`.
    /// `onRefusal` is told (on the acceptor's thread, once per connection, just before the
    /// close) of each peer closed without a worker after beginning a request: more than the
    /// largest allowed request, or parameters nginx never sends (`FastCGIRefusal`).
    public convenience init(
        configuration: FastCGIServerConfiguration,
        onRefusal: @escaping @Sendable (FastCGIRefusal) -> Void = { _ in },
        handler: @escaping Handler
    ) throws(FastCGIError) {
        try self.init(
            configuration: configuration, idlePollTimeout: FastCGIAcceptor.defaultIdlePollTimeout,
            roomGrace: FastCGIAcceptor.defaultRoomGrace, onRefusal: onRefusal, handler: handler)
    }

    init(
        configuration: FastCGIServerConfiguration, idlePollTimeout: Duration,
        roomGrace: Duration = FastCGIAcceptor.defaultRoomGrace, watchLimit: Int? = nil,
        onRefusal: @escaping @Sendable (FastCGIRefusal) -> Void = { _ in }, handler: @escaping Handler
    ) throws(FastCGIError) {
        try configuration.validate()
        self.configuration = configuration
        self.idlePollTimeout = idlePollTimeout
        self.roomGrace = roomGrace
        self.watchLimit = watchLimit
        self.onRefusal = onRefusal
        self.handler = handler
    }

    /// The listening TCP socket's own address ("127.0.0.1:PORT", from getsockname), nil for a
    /// unix socket or before `start()`.
    var boundAddress: String? { state.withLock { $0.listener?.boundAddress } }

    /// The TCP port actually bound (after `start()`), nil for a unix socket.
    public var boundPort: UInt16? { state.withLock { $0.listener?.boundPort } }

    /// True while the acceptor leaves new connections in the listen backlog for want of room
    /// (its capacity is full of connections waiting for a worker).
    var acceptorIsFull: Bool { state.withLock { $0.acceptor?.listenerIsSetAside ?? false } }

    /// Connections the acceptor holds against its watch limit (0 before `start()`).
    var acceptorHeldConnections: Int { state.withLock { $0.acceptor?.heldConnectionCount ?? 0 } }

    /// The acceptor's bounds once started: whole requests waiting for a worker, watched
    /// connections, draining ones, and its peek window.
    var acceptorBounds: (capacity: Int, watchLimit: Int, drainLimit: Int, window: Int)? {
        state.withLock { state in
            state.acceptor.map { ($0.capacity, $0.watchLimit, $0.drainLimit, $0.window) }
        }
    }

    /// Opens the socket and starts the workers, then returns. Pair with `stop(timeout:)`.
    /// The workers (and so this server) stay alive until they have exited.
    public func start() throws(FastCGIError) {
        try state.withLock { state throws(FastCGIError) in
            guard !state.started, !state.stopRequested else {
                throw FastCGIError(.alreadyStarted, "a FastCGIServer starts once")
            }
            try FastCGILibrary.initialize()
            // A TCP socket's receive buffer holds the acceptor's whole peek window: the request
            // waits in the kernel, unread, until it is whole.
            let listener = try FastCGIListener(
                address: configuration.address, backlog: configuration.backlog,
                receiveBuffer: configuration.maximumBodyBytes + FastCGIAcceptor.requestAllowance)
            let ends: (read: Int32, write: Int32)
            do throws(FastCGIError) {
                ends = try FastCGILibrary.makePipe()
            } catch {
                listener.closeAndRemove()
                throw error
            }
            var workers: [FastCGIWorker] = []
            let acceptor: FastCGIAcceptor
            do throws(FastCGIError) {
                acceptor = try FastCGIAcceptor(
                    listenFD: listener.fileDescriptor, stopFD: ends.read, requestTimeout: configuration.ioTimeout,
                    workerCount: configuration.workerCount, maximumBodyBytes: configuration.maximumBodyBytes,
                    idlePollTimeout: idlePollTimeout, roomGrace: roomGrace, watchLimit: watchLimit,
                    onRefusal: onRefusal)
                for _ in 0..<configuration.workerCount {
                    workers.append(
                        try FastCGIWorker(
                            acceptor: acceptor, maximumBodyBytes: configuration.maximumBodyBytes,
                            ioTimeout: configuration.ioTimeout, handler: handler))
                }
            } catch {
                listener.closeAndRemove()
                close(ends.read)
                close(ends.write)
                throw error
            }
            state.listener = listener
            state.acceptor = acceptor
            state.stopPipe = ends
            state.started = true
            // The acceptor thread counts as a worker: the socket closes only after it is out too.
            state.liveWorkers = workers.count + 1
            // Named for `top -H`, `ps -L`, perf and `scripts/bench-e2e`'s table of threads
            // (Foundation's `Thread.name` does not reach the kernel here).
            let acceptorThread = Thread { [self] in
                _ = siwa_name_this_thread("fcgi-poll")
                acceptor.run()
                workerExited()
            }
            acceptorThread.name = "fastcgi-acceptor"
            acceptorThread.start()
            for (index, worker) in workers.enumerated() {
                let thread = Thread { [self] in
                    _ = siwa_name_this_thread("fcgi-worker-\(index)")
                    worker.run()
                    workerExited()
                }
                thread.name = "fastcgi-worker-\(index)"
                thread.start()
            }
        }
    }

    /// The service's name in a `ServiceGroup`.
    public var name: String { "fastcgi-server" }

    /// As a service: serves (after `start()`) until `requestStop()`, then waits up to
    /// `shutdownTimeout` for requests in flight. A stop asked for before the group reaches
    /// this service's turn waits the same.
    public func run() {
        stopAsked.wait()
        cleanedUp.wait(until: ContinuousClock.now + configuration.shutdownTimeout)
    }

    /// Whether every worker finished and the socket is closed (after a stop): false while
    /// serving, and when the drain outlasted `shutdownTimeout`.
    public var hasDrained: Bool { cleanedUp.hasOpened }

    /// Stops accepting, lets requests in flight finish, and waits for them up to `timeout`
    /// (default: the configured `shutdownTimeout`). True when every worker finished in time.
    /// Safe to call more than once and from any thread.
    @discardableResult
    public func stop(timeout: Duration? = nil) -> Bool {
        requestStop()
        return cleanedUp.wait(until: ContinuousClock.now + (timeout ?? configuration.shutdownTimeout))
    }

    /// Stops accepting and asks the workers to finish, without waiting. Safe to call more
    /// than once and from any thread.
    public func requestStop() {
        let neverStarted = state.withLock { state -> Bool? in
            guard !state.stopRequested else { return nil }
            state.stopRequested = true
            guard state.started else { return true }
            state.acceptor?.closeListener()
            state.listener?.stopAccepting()
            var byte: UInt8 = 1
            _ = write(state.stopPipe.write, &byte, 1)
            return false
        }
        guard let neverStarted else { return }
        if neverStarted { cleanedUp.open() }
        stopAsked.open()
    }

    /// The last worker out closes the socket and the pipe: only then can no thread still be
    /// using their descriptor numbers.
    private func workerExited() {
        let last = state.withLock { state -> Bool in
            state.liveWorkers -= 1
            guard state.liveWorkers == 0 else { return false }
            state.listener?.closeAndRemove()
            close(state.stopPipe.read)
            close(state.stopPipe.write)
            return true
        }
        if last { cleanedUp.open() }
    }
}
