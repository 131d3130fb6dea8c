import Foundation
import Glibc
import Synchronization

/// The write end of the self-pipe, read by the signal handler. A C signal handler cannot
/// capture context, so this one global carries it; it is set before the handler is
/// installed and cleared only after the handler is removed.
nonisolated(unsafe) private var signalPipeWriteEnd: Int32 = -1

/// Why the signal handlers could not be installed.
public struct SignalSetupError: Error, Sendable, CustomStringConvertible {
    public let description: String
}

/// Turns SIGTERM, SIGINT and SIGHUP into a call on an ordinary thread. Used by
/// `ServiceGroup.run`, the one place of the process that handles signals.
///
/// Why not sigwait: a process-directed signal goes to any thread that does not block it,
/// and threads created before us (the Swift runtime's, Foundation's) do not block it. A
/// sigaction handler runs whichever thread receives it; it only writes one byte to a pipe
/// (async-signal-safe), and a watcher thread does the real work. This also replaces the
/// handler libfcgi would install, which merely sets a flag that a blocked accept never sees.
final class SignalWatcher: Sendable {
    /// Whether a watcher holds the handlers: set by the one `init` that may install them,
    /// cleared at the end of its `uninstall()`.
    private static let installed = Mutex(false)

    private let readEnd: Int32
    private let writeEnd: Int32
    /// The handlers to put back at `uninstall()`.
    private let previous: Mutex<[Int32: sigaction]>
    private let finished = DispatchSemaphore(value: 0)

    /// SIGHUP is caught too, so that it never ends the process (its default action):
    /// `serve` reloads the JWKS cache file on it. SIGPIPE is ignored while the watcher is
    /// installed: a peer that hangs up must cost one failed write, not the process.
    static let signals: [Int32] = [SIGTERM, SIGINT, SIGHUP, SIGPIPE]

    /// Installs the handlers; `onSignal` runs on the watcher thread, once per signal, except
    /// for SIGHUP (see `HangUpRunner`), which runs `onHangUp` on a thread of its own.
    init(
        onSignal: @escaping @Sendable (Int32) -> Void, onHangUp: @escaping @Sendable () -> Void
    ) throws(SignalSetupError) {
        let claimed = Self.installed.withLock { installed -> Bool in
            defer { installed = true }
            return !installed
        }
        guard claimed else { throw SignalSetupError(description: "another service group is already handling signals") }
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            let error = errno
            Self.installed.withLock { $0 = false }
            throw SignalSetupError(description: "pipe failed: \(String(cString: strerror(error)))")
        }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        readEnd = ends[0]
        writeEnd = ends[1]
        signalPipeWriteEnd = writeEnd
        var previous: [Int32: sigaction] = [:]
        for signal in Self.signals {
            var action = sigaction()
            if signal == SIGPIPE {
                action.__sigaction_handler.sa_handler = SIG_IGN
            } else {
                action.__sigaction_handler.sa_handler = { signal in
                    let savedErrno = errno
                    var byte = UInt8(truncatingIfNeeded: signal)
                    _ = write(signalPipeWriteEnd, &byte, 1)
                    errno = savedErrno
                }
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            var old = sigaction()
            sigaction(signal, &action, &old)
            previous[signal] = old
        }
        self.previous = Mutex(previous)
        // A parent may have started us with these signals blocked (inherited by every
        // thread): the caller's thread and the watcher's take them, so a stop never depends
        // on the parent's mask.
        var unblock = sigset_t()
        sigemptyset(&unblock)
        for signal in Self.signals { sigaddset(&unblock, signal) }
        pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
        let readEnd = readEnd
        let finished = finished
        let hangUps = HangUpRunner(onHangUp)
        let thread = Thread {
            var unblock = sigset_t()
            sigemptyset(&unblock)
            for signal in Self.signals { sigaddset(&unblock, signal) }
            pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
            var byte: UInt8 = 0
            while true {
                let count = read(readEnd, &byte, 1)
                if count < 0 && errno == EINTR { continue }
                // Byte 0 is our own "stop watching"; a closed pipe also ends the loop.
                guard count == 1, byte != 0 else { break }
                if Int32(byte) == SIGHUP { hangUps.request() } else { onSignal(Int32(byte)) }
            }
            hangUps.waitUntilIdle()
            finished.signal()
        }
        thread.name = "signals"
        thread.start()
    }

    /// Restores the previous handlers, then stops the watcher thread (after a SIGHUP run in
    /// progress) and closes the pipe.
    func uninstall() {
        let previous = self.previous.withLock { previous in
            defer { previous = [:] }
            return previous
        }
        for (signal, var old) in previous { sigaction(signal, &old, nil) }
        var zero: UInt8 = 0
        _ = write(writeEnd, &zero, 1)
        finished.wait()
        signalPipeWriteEnd = -1
        close(writeEnd)
        close(readEnd)
        Self.installed.withLock { $0 = false }
    }
}

/// Runs the SIGHUP work (a reload that reads a file) on a thread of its own, never on the
/// watcher thread: a reload that hangs must not keep a SIGTERM that follows from stopping
/// the group. SIGHUPs that arrive while one runs are folded into one more run after it.
private final class HangUpRunner: Sendable {
    private struct State {
        var running = false
        var pending = false
    }
    private let state = Mutex(State())
    /// Signalled each time the reload thread ends.
    private let ended = DispatchSemaphore(value: 0)
    private let work: @Sendable () -> Void

    init(_ work: @escaping @Sendable () -> Void) { self.work = work }

    func request() {
        let start = state.withLock { state -> Bool in
            if state.running {
                state.pending = true
                return false
            }
            state.running = true
            return true
        }
        guard start else { return }
        let thread = Thread { [self] in
            repeat {
                work()
            } while state.withLock { state -> Bool in
                defer { state.pending = false }
                state.running = state.pending
                return state.pending
            }
            ended.signal()
        }
        thread.name = "signals-hangup"
        thread.start()
    }

    /// Waits (a bounded while) for a reload in progress: the watcher owns this thread, and
    /// its owner waits for it at a stop. A reload that hangs past the bound is left behind.
    func waitUntilIdle() {
        guard state.withLock({ $0.running }) else { return }
        _ = ended.wait(timeout: .now() + 5)
    }
}
