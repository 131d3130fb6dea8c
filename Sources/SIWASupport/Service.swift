/// A long-running part of `serve` (the JWKS refresher, the circuit breaker's probe, the
/// FastCGI server, the spool replayer): it runs on a thread of its own until asked to stop.
/// A `ServiceGroup` starts services in order and stops them in reverse, within one
/// deadline, the way swift-service-lifecycle's `ServiceGroup` arranges its services
/// (without taking that dependency).
public protocol Service: Sendable {
    /// Why `start()` can fail (`Never` for a service with nothing to prepare).
    associatedtype StartError: Error = Never

    /// The name of the service's thread, and of the service in the log.
    var name: String { get }

    /// What must be ready before the next service starts (a socket that listens), done on
    /// the caller's thread before `run()` is. A failure here means the service never ran.
    func start() throws(StartError)

    /// Runs until `requestStop()`; returns soon after it (a step in progress finishes).
    /// Returning before a stop was asked for stops the group (see `ServiceGroup.StopCause`).
    func run()

    /// Asks `run()` to return, without waiting for it. Safe from any thread, at any time.
    func requestStop()
}

extension Service where StartError == Never {
    /// Nothing to prepare: the service starts in `run()`.
    public func start() {}
}
