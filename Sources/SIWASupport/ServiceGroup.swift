import Foundation
import Synchronization

/// The background services of `serve`: each started on a thread of its own, in the order
/// given; a stop asks every one at once, last started first, and waits for them in that
/// order, all until one shared deadline (the shutdown deadline the drain keeps too).
public final class ServiceGroup: Sendable {
    private struct Started: Sendable {
        let service: any Service
        let finished: Latch
    }

    private let started = Mutex<[Started]>([])

    public init() {}

    /// Starts `service` on a thread of its own, after the services started before it.
    public func start(_ service: any Service) {
        let finished = Latch()
        started.withLock { $0.append(Started(service: service, finished: finished)) }
        let thread = Thread {
            service.run()
            finished.open()
        }
        thread.name = service.name
        thread.start()
    }

    /// Asks every service to stop, last started first, without waiting.
    public func requestStop() {
        for entry in started.withLock({ $0 }).reversed() { entry.service.requestStop() }
    }

    /// Asks every service to stop, then waits for each, last started first, until
    /// `deadline`. True when all of them returned in time.
    @discardableResult
    public func stop(until deadline: ContinuousClock.Instant) -> Bool {
        requestStop()
        var allStopped = true
        for entry in started.withLock({ $0 }).reversed() where !entry.finished.wait(until: deadline) {
            allStopped = false
        }
        return allStopped
    }
}
