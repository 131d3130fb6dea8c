import SIWARedis
import SIWAStore
import SIWASupport
import SIWATelemetry

/// The silence figures' record in Redis (`P:clients`), apart from the responder so that what a
/// request may write there is named where the responder is built: a genuine notification
/// stored live writes its client ID's last time at most once a minute (`recordGenuine`, on the
/// request's thread, through the responder's pool of stores); the first read of the record
/// (`loadOnce`) is made by the `ClientActivityLoader` service, or by that first write.
public final class ClientActivityRecord: Sendable {
    let traffic: ClientTraffic
    private let stores: NotificationStorePool
    private let breaker: RedisCircuitBreaker
    private let clock: EndpointClock
    private let log: EventLog.Sink

    init(
        traffic: ClientTraffic, stores: NotificationStorePool, breaker: RedisCircuitBreaker, clock: EndpointClock,
        log: EventLog.Sink
    ) {
        self.traffic = traffic
        self.stores = stores
        self.breaker = breaker
        self.clock = clock
        self.log = log
    }

    /// A genuine notification answered 200: counted; written to `P:clients` at most once a
    /// minute per client ID when it reached Redis (best effort: the figures are about
    /// delivery, a failed write loses nothing a user needs).
    func recordGenuine(clientID: String, stored: Bool) {
        let now = clock.wallMilliseconds()
        guard traffic.recordGenuine(clientID: clientID, at: now), stored, !breaker.isOpen else { return }
        loadOnce()
        do {
            try stores.withStore { store throws(RedisError) in
                try store.recordClientNotification(clientID: clientID, at: now)
            }
        } catch {
            log.event(
                "client_activity_not_recorded", level: "warning",
                [("error", .string(error.code.rawValue)), ("client_id", .string(clientID))])
        }
    }

    /// Reads `P:clients` once (when Redis answers), so a silence that began before this
    /// process started, or on another node, is not forgotten.
    func loadOnce() {
        guard traffic.needsLoading, !breaker.isOpen else { return }
        do {
            let activity = try stores.withStore { store throws(RedisError) in
                try store.clientActivity(clientIDs: traffic.clientIDs, now: clock.wallMilliseconds())
            }
            traffic.load(activity)
        } catch {
            // A refusal (an ACL without HSETNX or HGETALL) would come back at every try:
            // said once, and this process's own figures are used from then on.
            if !error.isConnectionError { traffic.load([:]) }
            log.event(
                "client_activity_not_read", level: "warning",
                [("error", .string(error.code.rawValue)), ("reason", .string(error.operatorMessage))])
        }
    }
}
