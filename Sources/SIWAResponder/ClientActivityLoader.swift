import SIWASupport

/// Reads `P:clients` once Redis answers (every 15 s until it has), so the silence figures
/// carry what other nodes and earlier processes saw from the start, and a `/metrics`
/// scrape never waits on Redis for them. Run it in a `ServiceGroup`.
public final class ClientActivityLoader: Service {
    public let name = "client-activity-loader"
    private let record: ClientActivityRecord
    private let interval: Duration
    private let task = PeriodicTask()

    /// `record`: the responder's (`NotificationResponder.clientActivity`); nothing else of it.
    public init(record: ClientActivityRecord, interval: Duration = .seconds(15)) {
        self.record = record
        self.interval = interval
    }

    public func run() {
        task.run {
            record.loadOnce()
            // Once read, nothing is left to do but wait for the stop.
            return record.traffic.needsLoading ? interval : .seconds(3600)
        }
    }

    public func requestStop() { task.requestStop() }
}
