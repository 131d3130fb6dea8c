import Foundation

/// Polls `condition` every `interval` until it holds or `timeout` seconds pass; true once it
/// held. The one way the tests wait on an event (never a fixed sleep): bounded in time, with
/// a last look at the deadline.
public func waitUntil(
    timeout: TimeInterval, interval: Duration = .milliseconds(50), _ condition: () throws -> Bool
) rethrows -> Bool {
    let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int64(timeout * 1000)))
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        Thread.sleep(
            forTimeInterval: Double(interval.components.attoseconds) / 1e18 + Double(interval.components.seconds))
    }
    return try condition()
}
