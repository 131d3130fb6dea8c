import SIWARedis
import SIWASupport
import SIWATelemetry
import Synchronization

/// The service behind the deletion-duty figures of `/metrics`: it reads the deletions
/// stream on a thread and connection of its own, every `interval` (sooner when nudged,
/// after an `account-deleted` was stored: at once, or a second after the last reading
/// at the latest), and keeps the last reading. `/metrics` only
/// renders that reading, so a scrape never waits on Redis: while Redis is down the last
/// figures stay, `siwa_deletions_reading_age_seconds` grows, and the oldest pending age
/// keeps growing with the wall clock. Run it in a `ServiceGroup`.
public final class DeletionDutyMonitor: Service {
    public let name = "deletion-duty-monitor"
    public let key: String
    public let interval: Duration
    private let connection: Mutex<RedisConnection>
    private let clock: EndpointClock
    /// Nudged after every `account-deleted`: read at most once a second for them (a
    /// reading is a few Redis commands; under load, one per deletion was a visible share of
    /// serve's time and of Redis's), and at once after a quiet second.
    private let task = PeriodicTask(nudgeSpacing: .seconds(1))
    private let latest = Mutex<(reading: DeletionDutyReading, readAt: Int64)?>(nil)
    private let failing = Mutex(false)
    /// The app transfer windows are read on the same tick and connection (see
    /// `TransferWindowReading`): the key layout and the client IDs served.
    private let transfers: (keys: RedisKeyLayout, clientIDs: [String])?
    private let transferReading = Mutex<TransferWindowReading?>(nil)

    public init(
        connection: sending RedisConnection, key: String, interval: Duration = .seconds(15), clock: EndpointClock,
        transfers: (keys: RedisKeyLayout, clientIDs: [String])? = nil
    ) {
        self.connection = Mutex(connection)
        self.key = key
        self.interval = interval
        self.clock = clock
        self.transfers = transfers
    }

    /// The last reading and its wall time (ms), or nil before the first.
    var lastReading: (reading: DeletionDutyReading, readAt: Int64)? { latest.withLock { $0 } }

    /// Reads the stream once; a failure keeps the previous reading (logged once per outage).
    func readOnce() {
        do {
            let transfers = self.transfers
            let (reading, windows) = try connection.withLock {
                connection throws(RedisError) -> (DeletionDutyReading, TransferWindowReading?) in
                (
                    try DeletionDutyReading.read(connection, key: key),
                    try transfers.map { transfers throws(RedisError) in
                        try TransferWindowReading.read(connection, keys: transfers.keys, clientIDs: transfers.clientIDs)
                    }
                )
            }
            let now = clock.wallMilliseconds()
            latest.withLock { $0 = (reading, now) }
            transferReading.withLock { $0 = windows }
            if failing.withLock({ state in
                defer { state = false }; return state
            }) {
                EventLog.event("deletions_reading_resumed", [("stream", .string(key))])
            }
        } catch {
            if !failing.withLock({ state in
                defer { state = true }; return state
            }) {
                EventLog.event(
                    "deletions_reading_failed", level: "warning",
                    [("stream", .string(key)), ("error", .string(error.code.rawValue))])
            }
        }
    }

    public func run() {
        task.run {
            readOnce()
            return interval
        }
    }

    /// A deletion was just recorded: read again now rather than at the next tick.
    public func nudge() { task.nudge() }

    public func requestStop() { task.requestStop() }

    /// The deletion-duty lines of `/metrics`, from the last reading; ages against `now` (ms).
    public func metricsText(now: Int64) -> String {
        ServerMetrics.renderDeletionDuty(lastReading, now: now)
            + (transferReading.withLock { $0 }?.metricsText(now: now) ?? "")
    }
}
