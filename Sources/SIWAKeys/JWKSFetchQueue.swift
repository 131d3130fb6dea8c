import SIWASupport
import Synchronization

/// Where an unknown kid's fetch goes to be made off the request's thread: built once
/// (serve's assembly) and given to both sides, the JWKS provider, which hands a fetch to it,
/// and the JWKS refresher, which runs it on its thread, woken at once (the queue is its
/// loop's doorbell). While no service runs it (before the refresher's start, after its
/// run) nothing is handed over: the caller makes the fetch itself, as a bare provider does.
public final class JWKSFetchQueue: Sendable {
    /// One fetch handed over: `run` makes it; `drop` tells its waiters it was not made.
    struct Fetch: Sendable {
        let run: @Sendable () -> Void
        let drop: @Sendable () -> Void
    }

    private struct State {
        /// A service runs the queue (between `open()` and `close()`).
        var isOpen = false
        /// Handed over and not begun.
        var pending: Fetch?
    }

    private let state = Mutex(State())
    /// The loop of the service that runs the queue: a fetch handed over ends its wait.
    let loop = PeriodicTask()

    public init() {}

    /// Whether a service runs the queue now.
    var isOpen: Bool { state.withLock { $0.isOpen } }

    /// Hands `fetch` to the service and wakes it; false when no service runs the queue (the
    /// fetch is then the caller's to make or drop).
    func hand(_ fetch: Fetch) -> Bool {
        let handed = state.withLock { state -> Bool in
            guard state.isOpen, state.pending == nil else { return false }
            state.pending = fetch
            return true
        }
        if handed { loop.nudge() }
        return handed
    }

    /// The service begins to run the queue (the refresher's `start()`).
    func open() { state.withLock { $0.isOpen = true } }

    /// Makes the fetch handed over, if any, on the caller's thread (the service's).
    func runPending() {
        let fetch = state.withLock { state -> Fetch? in
            defer { state.pending = nil }
            return state.pending
        }
        fetch?.run()
    }

    /// The service stops: nothing more is handed over, and a fetch handed over and not
    /// begun is dropped (its waiters are told `skipped`).
    func close() {
        let dropped = state.withLock { state -> Fetch? in
            state.isOpen = false
            defer { state.pending = nil }
            return state.pending
        }
        dropped?.drop()
    }
}
