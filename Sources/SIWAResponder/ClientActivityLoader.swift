import SIWASupport

/// Reads `P:clients` once Redis answers (every 15 s until it has), so the silence figures
/// carry what other nodes and earlier processes saw from the start, and a `/metrics`
/// scrape never waits on Redis for them. Run it in a `ServiceGroup`.
public final class ClientActivityLoader: Service {
    public let name = "client-activity-loader"
    private let responder: NotificationResponder
    private let interval: Duration
    private let task = PeriodicTask()

    public init(responder: NotificationResponder, interval: Duration = .seconds(15)) {
        self.responder = responder
        self.interval = interval
    }

    public func run() {
        task.run {
            responder.loadClientActivity()
            // Once read, nothing is left to do but wait for the stop.
            return responder.clientTraffic.needsLoading ? interval : .seconds(3600)
        }
    }

    public func requestStop() { task.requestStop() }
}
