/// A long-running part of `serve` (the JWKS refresher, the spool replayer): it runs on a
/// thread of its own until asked to stop. A `ServiceGroup` starts services in order and
/// stops them in reverse, within one deadline, the way swift-service-lifecycle's
/// `ServiceGroup` arranges its services (without taking that dependency).
public protocol Service: Sendable {
    /// The name of the service's thread.
    var name: String { get }

    /// Runs until `requestStop()`; returns soon after it (a step in progress finishes).
    func run()

    /// Asks `run()` to return, without waiting for it. Safe from any thread, at any time.
    func requestStop()
}
