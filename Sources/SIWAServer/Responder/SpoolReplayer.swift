import Foundation
import SIWAVerification

/// Moves spooled notifications into Redis once it answers again: at start, then every
/// second while the spool is not empty, on a thread of its own with its own connection.
public final class SpoolReplayer: @unchecked Sendable {
    private let spool: NotificationSpool
    /// Records Redis refuses for good (a key of the wrong type): kept here, not retried,
    /// so one bad record cannot hold back every record after it.
    private let rejected: NotificationSpool
    private let store: NotificationStore
    private let metrics: ServerMetrics
    private let clock: @Sendable () -> Int64
    /// A record leaves the spool only once this many replicas hold it (`SIWA_REDIS_MIN_REPLICAS`).
    private let minimumReplicas: Int
    private let replicaTimeout: Duration
    private let condition = NSCondition()
    private var stopping = false
    private var running = false

    /// `clockMilliseconds` gives the `updated_at` written for replayed notifications.
    public init(
        spool: NotificationSpool, rejected: NotificationSpool, store: NotificationStore, metrics: ServerMetrics,
        clockMilliseconds: @escaping @Sendable () -> Int64, minimumReplicas: Int = 0,
        replicaTimeout: Duration = .milliseconds(100)
    ) {
        self.minimumReplicas = minimumReplicas
        self.replicaTimeout = replicaTimeout
        self.spool = spool
        self.rejected = rejected
        self.store = store
        self.metrics = metrics
        self.clock = clockMilliseconds
    }

    /// One pass: applies what is waiting, in order, until done or Redis fails.
    @discardableResult
    public func replayOnce() -> SpoolReplayReport {
        let report = spool.replay { notification in
            do {
                let acknowledged = try store.apply(
                    notification, receivedAt: clock(), minimumReplicas: minimumReplicas, replicaTimeout: replicaTimeout)
                if acknowledged.isShortfall {
                    // Kept until enough replicas hold it; the pass stops here and tries again later.
                    throw RedisError(.replicaShortfall, "fewer replicas than SIWA_REDIS_MIN_REPLICAS acknowledged")
                }
            } catch let error as RedisError where !error.isTransient {
                // Set aside durably before the spool moves past it; if that fails, stop here.
                try rejected.append(notification)
                metrics.recordSpoolRejected()
                EventLog.event(
                    "spool_record_rejected", level: "error",
                    [
                        ("error", .string(error.code.rawValue)), ("reason", .string(error.message)),
                        ("client_id", .string(notification.clientID)), ("type", .string(notification.type.name)),
                        ("kept_in", .string(rejected.directory)),
                    ])
            }
        }
        if report.applied > 0 {
            metrics.recordSpoolReplayed(report.applied)
            EventLog.event(
                "spool_replayed",
                [("applied", .integer(Int64(report.applied))), ("remaining", .integer(Int64(report.remaining)))])
        }
        for setAside in report.setAside {
            metrics.recordTornSpoolRecords(1)
            EventLog.event(
                "spool_record_set_aside", level: "error",
                [
                    ("reason", .string("\(setAside.reason)")), ("segment", .string(setAside.segmentFile)),
                    ("offset", .integer(Int64(setAside.offset))), ("bytes", .integer(Int64(setAside.byteCount))),
                    ("kept_in", .string(setAside.tornFile)),
                ])
        }
        if let spoolError = report.spoolError {
            EventLog.event("spool_replay_failed", level: "error", [("error", .string(spoolError.code.rawValue))])
        }
        return report
    }

    /// Starts the background thread.
    public func start() {
        condition.withLock { running = true }
        let thread = Thread { [self] in
            while true {
                let stop = condition.withLock { () -> Bool in
                    if !stopping { _ = condition.wait(until: Date(timeIntervalSinceNow: 1)) }
                    return stopping
                }
                if stop { break }
                // Ping first: a replay pass against a Redis that is still down only churns segments.
                if spool.depth > 0, store.ping() { replayOnce() }
            }
            condition.withLock {
                running = false
                condition.broadcast()
            }
        }
        thread.name = "spool-replayer"
        thread.start()
    }

    /// Wakes the thread for an immediate pass (after a notification was spooled).
    public func nudge() { condition.withLock { condition.broadcast() } }

    /// Stops the thread, waiting up to `timeoutSeconds` for a pass in progress.
    @discardableResult
    public func stop(timeoutSeconds: Double = 10) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeoutSeconds)
        return condition.withLock {
            stopping = true
            condition.broadcast()
            while running { if !condition.wait(until: deadline) { return false } }
            return true
        }
    }
}
