import Foundation
import Glibc
import Synchronization

/// The write end of the self-pipe, read by the signal handler. A C signal handler cannot
/// capture context, so this one global carries it; it is set before the handler is
/// installed and cleared only after the handler is removed.
nonisolated(unsafe) private var signalPipeWriteEnd: Int32 = -1

/// Turns SIGTERM, SIGINT and SIGHUP into a call on an ordinary thread.
///
/// Why not sigwait: a process-directed signal goes to any thread that does not block it,
/// and threads created before us (the Swift runtime's, Foundation's) do not block it. A
/// sigaction handler runs whichever thread receives it; it only writes one byte to a pipe
/// (async-signal-safe), and a watcher thread does the real work. This also replaces the
/// handler libfcgi would install, which merely sets a flag that a blocked accept never sees.
final class FastCGISignalWatcher: Sendable {
    /// Whether a watcher holds the handlers: set by the one `init` that may install them,
    /// cleared at the end of its `uninstall()`.
    private static let installed = Mutex(false)

    private let readEnd: Int32
    private let writeEnd: Int32
    /// The handlers to put back at `uninstall()`.
    private let previous: Mutex<[Int32: sigaction]>
    private let finished = DispatchSemaphore(value: 0)

    /// SIGHUP is caught too, so that it never ends the process (its default action):
    /// `serve` reloads the JWKS cache file on it.
    static let signals: [Int32] = [SIGTERM, SIGINT, SIGHUP]

    /// Installs the handlers; `onSignal` runs on the watcher thread, once per signal, except
    /// for SIGHUP (see `HangUpRunner`).
    init(onSignal: @escaping @Sendable (Int32) -> Void) throws(FastCGIError) {
        let claimed = Self.installed.withLock { installed -> Bool in
            defer { installed = true }
            return !installed
        }
        guard claimed else {
            throw FastCGIError(.signalSetupFailed, "another FastCGIServer is already handling signals")
        }
        let ends: (read: Int32, write: Int32)
        do throws(FastCGIError) {
            ends = try FastCGILibrary.makePipe()
        } catch {
            Self.installed.withLock { $0 = false }
            throw error
        }
        readEnd = ends.read
        writeEnd = ends.write
        signalPipeWriteEnd = writeEnd
        var previous: [Int32: sigaction] = [:]
        for signal in Self.signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { signal in
                let savedErrno = errno
                var byte = UInt8(truncatingIfNeeded: signal)
                _ = write(signalPipeWriteEnd, &byte, 1)
                errno = savedErrno
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            var old = sigaction()
            sigaction(signal, &action, &old)
            previous[signal] = old
        }
        self.previous = Mutex(previous)
        let readEnd = readEnd
        let finished = finished
        let hangUps = HangUpRunner { onSignal(SIGHUP) }
        let thread = Thread {
            // If a parent started us with these signals blocked (inherited by every thread),
            // this thread at least can take them, so a stop never depends on the caller's mask.
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
            finished.signal()
        }
        thread.name = "fastcgi-signals"
        thread.start()
    }

    /// Restores the previous handlers, then stops the watcher thread and closes the pipe.
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
/// the server. SIGHUPs that arrive while one runs are folded into one more run after it.
private final class HangUpRunner: Sendable {
    private struct State {
        var running = false
        var pending = false
    }
    private let state = Mutex(State())
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
        }
        thread.name = "fastcgi-hangup"
        thread.start()
    }
}
