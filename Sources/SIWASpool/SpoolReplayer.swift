import Foundation
import SIWARedis
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWAVerification
import Synchronization

/// The service that moves spooled notifications into Redis once it answers again, on a
/// thread of its own with its own connection: a first pass as soon as it starts (after the
/// socket is listening), then every second (or at once when nudged) while the spool is not
/// empty, always after a `PING`. Run it in a `ServiceGroup`.
///
/// Retry is the default. Only a refusal known to be about one record (a user key of the
/// wrong type, an unsafe key part, an `aud` this deployment does not serve) makes it a
/// rejected record, kept in `rejected/`; anything else (NOPERM, NOAUTH, `max number of clients`, a
/// script error every call hits) keeps every record queued in order and is reported as
/// `blockedReason`, which turns /healthz to 503.
public final class SpoolReplayer: Service {
    private let spool: NotificationSpool
    /// Where records Redis rejected for a reason about them are kept (`rejected/`).
    private let rejected: SpoolSetAsideStore
    /// The replayer's own store and connection (a hiredis context is not thread safe): its
    /// thread uses it, and a direct `replayOnce()` (the bench, the tests) while no thread runs.
    private let store: Mutex<UnsafeTransfer<any NotificationStoring>>
    private let metrics: ServerMetrics
    private let clientIDs: Set<String>
    /// Google's client IDs served now (`SIWA_GOOGLE_CLIENT_IDS`): a spooled token naming
    /// none of them is rejected (kept in `rejected/`), not applied.
    private let googleClientIDs: Set<String>
    private let retentionDays: Int
    /// Wall time for the `updated_at` of replayed notifications and the retention's file
    /// ages; monotonic time for when the hourly retention cleanup is due.
    private let clock: EndpointClock
    private let task = PeriodicTask()
    private let blocked = Mutex<String?>(nil)
    /// Since when (monotonic) every pass has met `TRYAGAIN` (a slot move), or nil.
    private let slotMoveSince = Mutex<ContinuousClock.Instant?>(nil)

    /// How long a Redis Cluster slot move may keep the spooled records waiting (every pass
    /// answered `TRYAGAIN`) before /healthz turns 503 naming it: a reshard moves one slot's
    /// keys in seconds, so a minute means a migration left half done (`MIGRATING` and
    /// `IMPORTING` set, the slot never given to its target), which no wait ends.
    static let stuckSlotMoveBound: Duration = .seconds(60)
    /// Users whose `account-deleted` was stored live, whose set-aside records the service
    /// has yet to scrub (the request only adds to this list and nudges).
    private let pendingScrubs = Mutex<[UserOfClient]>([])
    /// Whether this start's look for set-aside records of users already deleted in Redis
    /// (what a crash between a live `account-deleted` and its scrub leaves) is still to do.
    private let deletedUsersScrubPending = Mutex(true)

    private struct UserOfClient: Sendable {
        let clientID: String
        let subject: String
    }
    public let name = "spool-replayer"
    /// Where its lines go (what each pass did, torn records, expired files, scrubs).
    let log: EventLog.Sink
    /// Two weeks: time to look at a set-aside record before it goes.
    public static let defaultRetentionDays = 14
    /// The retention the settings accept: a day to ten years.
    public static let retentionDaysRange = 1...3650

    /// `clock` gives the `updated_at` written for replayed notifications (its wall reading).
    /// `clientIDs` are the ones served now: a record for another is rejected (kept in `rejected/`), not applied.
    public init(
        spool: NotificationSpool, rejected: SpoolSetAsideStore, store: any NotificationStoring,
        metrics: ServerMetrics,
        clientIDs: Set<String>, googleClientIDs: Set<String> = [], retentionDays: Int = defaultRetentionDays,
        clock: EndpointClock, log: EventLog.Sink = .standardError
    ) {
        self.googleClientIDs = googleClientIDs
        self.log = log
        self.spool = spool
        self.rejected = rejected
        self.store = Mutex(UnsafeTransfer(store))
        self.metrics = metrics
        self.clientIDs = clientIDs
        self.retentionDays = retentionDays
        self.clock = clock
    }

    /// Why records wait although Redis answers PING (a refusal, a spool that cannot be
    /// read), or nil. /healthz names it.
    public var blockedReason: String? { blocked.withLock { $0 } }

    /// Why a pass stops before the spool is empty; the record it was at stays queued.
    public enum Stop: Error, Sendable {
        /// `requestStop()` was called.
        case stopRequested
        /// Redis did not take the record: down (wait for it), or refusing for a reason
        /// about the deployment (the pass is blocked, named).
        case redis(RedisError)
        /// Redis refused the record for a reason about it, and it could not be kept in
        /// `rejected/`: it stays queued, and the pass is blocked, named.
        case rejectedRecordNotKept(SpoolError)
    }

    /// One pass: applies what is waiting, in order, until done or something stops it.
    @discardableResult
    public func replayOnce() -> SpoolReplayReport<Stop> {
        let report = spool.replay(
            { (notification, attemptedAt) throws(Stop) -> SpoolReplayStep in
                try replay(notification, attemptedAt: attemptedAt)
            },
            securityEvent: { (securityEvent, _) throws(Stop) -> SpoolReplayStep in try self.replay(securityEvent) })
        let rejectedCount = report.count(.rejected)
        let stored = report.taken - rejectedCount
        if stored > 0 { metrics.recordSpoolReplayed(stored) }
        if report.taken > 0 {
            log.event(
                "spool_replayed",
                [
                    ("applied", .integer(Int64(report.count(.stored(.applied))))),
                    ("duplicate", .integer(Int64(report.count(.stored(.duplicate))))),
                    ("stored", .integer(Int64(report.count(.stored(.stored))))),
                    ("stale", .integer(Int64(report.count(.stored(.stale))))),
                    ("recorded", .integer(Int64(report.count(.stored(.recorded))))),
                    ("rejected", .integer(Int64(rejectedCount))),
                    // The former name of `rejected`, for one release.
                    ("set_aside", .integer(Int64(rejectedCount))),
                    ("remaining", .integer(Int64(report.remaining))),
                ])
        }
        for torn in report.torn {
            metrics.recordTornSpoolRecords(1)
            SpoolRenamedEvent.recordTorn.log(
                to: log,
                level: "error",
                [
                    ("reason", .string(torn.reason.rawValue)), ("segment", .string(torn.segmentFile)),
                    ("offset", .integer(Int64(torn.offset))), ("bytes", .integer(Int64(torn.byteCount))),
                    ("kept_in", .string(torn.tornFile)),
                ])
        }
        if !Self.stoppedBySlotMove(report.stop) { slotMoveSince.withLock { $0 = nil } }
        if let spoolError = report.spoolError {
            setBlocked("the spool cannot be replayed: \(spoolError.code.rawValue): \(spoolError.message)")
        } else if let stop = report.stop {
            switch stop {
            case .stopRequested:
                break
            case .redis(let redisError) where redisError.isConnectionError:
                break
            case .redis(let redisError) where Self.stoppedBySlotMove(stop):
                // A Redis Cluster slot being moved: every record waits until it settles (paced
                // below); a move is routine, not a refusal about the deployment for /healthz,
                // until it has lasted `stuckSlotMoveBound`.
                let now = clock.monotonic()
                let since = slotMoveSince.withLock { since in
                    if since == nil { since = now }
                    return since ?? now
                }
                if now - since >= Self.stuckSlotMoveBound {
                    setBlocked(
                        "a Redis Cluster slot move has kept the spooled records waiting for "
                            + "\((now - since).wholeSeconds) s (\(redisError.replyKind), over "
                            + "\(Self.stuckSlotMoveBound.wholeSeconds) s): a migration left half done? "
                            + "(CLUSTER SETSLOT ... NODE, or redis-cli --cluster fix): \(redisError.message)")
                }
            case .redis(let redisError):
                setBlocked("Redis refuses the spooled records (\(redisError.replyKind)): \(redisError.message)")
            case .rejectedRecordNotKept(let spoolError):
                setBlocked(
                    "a refused record cannot be set aside: \(spoolError.code.rawValue): \(spoolError.message)")
            }
        } else {
            setBlocked(nil)
        }
        return report
    }

    /// One record: stored in Redis (with enough replicas), or rejected and kept in `rejected/`.
    private func replay(_ notification: VerifiedNotification, attemptedAt: Int64?) throws(Stop) -> SpoolReplayStep {
        if task.isStopRequested { throw .stopRequested }
        guard clientIDs.contains(notification.clientID) else {
            return try keepRejected(
                notification, code: "aud_not_served", reason: "the record's aud is not in SIWA_CLIENT_IDS")
        }
        let acknowledged: NotificationStore.Acknowledged
        do throws(RedisError) {
            let receivedAt = clock.wallMilliseconds()
            acknowledged = try store.withLock { store throws(RedisError) in
                // A record leaves the spool only once the replicas the store waits for hold it.
                try store.value.applyAcknowledged(notification, receivedAt: receivedAt, earlierAttempt: attemptedAt)
            }
        } catch  where error.isRecordSpecific {
            // WRONGTYPE names the record's cause better than redis_server_error does.
            return try keepRejected(
                notification, code: error.code.rawValue, reason: error.message, why: error.replyKind.lowercased())
        } catch {
            throw .redis(error)
        }
        if notification.type == .accountDeleted {
            // Replayed on the service's own thread: scrubbed at once.
            scrubEmail(clientID: notification.clientID, subject: notification.subject)
        }
        try checkReplicas(acknowledged)
        return .stored(acknowledged.outcome)
    }

    /// One of Google's records, as `replay(_:attemptedAt:)` takes Apple's: stored in Redis by
    /// the store's Google script (with enough replicas), or rejected and kept in `rejected/`.
    /// A token whose earlier attempt did commit answers `duplicate` (Google's seen marker is
    /// per `jti`); either way it is stored once.
    private func replay(_ securityEvent: VerifiedSecurityEvent) throws(Stop) -> SpoolReplayStep {
        if task.isStopRequested { throw .stopRequested }
        guard securityEvent.clientIDs.allSatisfy({ googleClientIDs.contains($0) }) else {
            return try keepRejected(
                securityEvent, code: "aud_not_served", reason: "the record's aud is not in SIWA_GOOGLE_CLIENT_IDS")
        }
        let acknowledged: NotificationStore.Acknowledged
        do throws(RedisError) {
            let receivedAt = clock.wallMilliseconds()
            acknowledged = try store.withLock { store throws(RedisError) in
                try store.value.applyAcknowledged(securityEvent, receivedAt: receivedAt)
            }
        } catch  where error.isRecordSpecific {
            return try keepRejected(
                securityEvent, code: error.code.rawValue, reason: error.message, why: error.replyKind.lowercased())
        } catch {
            throw .redis(error)
        }
        try checkReplicas(acknowledged)
        return .stored(acknowledged.outcome)
    }

    /// Stops the pass at a record whose write the replicas the store waits for do not hold.
    private func checkReplicas(_ acknowledged: NotificationStore.Acknowledged) throws(Stop) {
        if let refusal = acknowledged.replicaCheckRefusal {
            // Nobody knows which replicas hold it: kept, and the pass is blocked, named.
            throw .redis(
                RedisError(refusal.code, "\(refusal.message) (the answer to the replica check, PUBLISH or WAIT)"))
        }
        if acknowledged.isShortfall {
            // Kept until enough replicas hold it; the pass stops here and tries again
            // later (the repeat is a `duplicate` in Redis).
            throw .redis(RedisError(.replicaShortfall, "fewer replicas than SIWA_REDIS_MIN_REPLICAS acknowledged"))
        }
    }

    /// After an `account-deleted` was stored live: the request path only notes the user and
    /// nudges; the service's thread scrubs that user's set-aside records (it lists and
    /// rewrites `rejected/` under the directory lock, which no request waits on). When
    /// `rejected/` held no record at the last look and none was set aside since (nearly
    /// always), there is no nudge: the next pass, within a second, looks again and scrubs.
    public func queueSetAsideScrub(after notification: VerifiedNotification) {
        guard notification.type == .accountDeleted else { return }
        pendingScrubs.withLock {
            $0.append(UserOfClient(clientID: notification.clientID, subject: notification.subject))
        }
        if rejected.mayHoldRecords { task.nudge() }
    }

    /// Scrubs every user noted by `queueSetAsideScrub(after:)` so far (on the service's thread, or by a
    /// caller while no thread runs, as `replayOnce()`).
    func scrubPending() {
        let users = pendingScrubs.withLock { pending in
            defer { pending = [] }
            return pending
        }
        // One look at `rejected/` for all of them: it is nearly always empty, and a live
        // `account-deleted` must not cost a listing each (records are set aside on this
        // thread, so none appears between this look and the scrubs).
        guard !users.isEmpty, rejected.holdsRecords else { return }
        for user in users { scrubEmail(clientID: user.clientID, subject: user.subject) }
    }

    /// Once per start, as soon as Redis answers: every set-aside record still holding an
    /// address whose user's `account-deleted` is already stored in Redis loses it. That is
    /// the scrub a crash between a live `account-deleted` (answered 200) and the service's
    /// scrub left undone. Until Redis answers, it is tried again at each pass.
    func scrubUsersDeletedInRedis() {
        guard deletedUsersScrubPending.withLock({ $0 }) else { return }
        let users: [(clientID: String, subject: String)]
        do throws(SpoolError) {
            users = try rejected.usersWithEmail()
        } catch {
            SpoolRenamedEvent.rejectedEmailNotRemoved.log(
                to: log, level: "error", [("error", .string(error.description))])
            return
        }
        for user in users {
            if task.isStopRequested { return }
            let deleted: Bool
            do throws(RedisError) {
                deleted = try store.withLock { store throws(RedisError) in
                    try store.value.isAccountDeleted(clientID: user.clientID, subject: user.subject)
                }
            } catch  where error.isConnectionError {
                // Redis is away: the whole look is done again at a later pass.
                return
            } catch  where error.isRecordSpecific {
                // A refusal about this user's key (WRONGTYPE): no stored deletion to honour.
                continue
            } catch {
                // A refusal about the deployment (NOPERM for HEXISTS): said once, not retried.
                SpoolRenamedEvent.rejectedEmailNotRemoved.log(
                    to: log,
                    level: "error", [("error", .string("\(error.code.rawValue): \(error.message)"))])
                break
            }
            if deleted { scrubEmail(clientID: user.clientID, subject: user.subject) }
        }
        deletedUsersScrubPending.withLock { $0 = false }
    }

    /// Set-aside records of this user lose their email address.
    private func scrubEmail(clientID: String, subject: String) {
        do {
            let scrubbed = try rejected.forgetEmail(clientID: clientID, subject: subject)
            if scrubbed > 0 {
                SpoolRenamedEvent.rejectedEmailRemoved.log(
                    to: log,
                    [("client_id", .string(clientID)), ("records", .integer(Int64(scrubbed)))])
            }
        } catch {
            SpoolRenamedEvent.rejectedEmailNotRemoved.log(
                to: log, level: "error", [("error", .string(error.description))])
        }
    }

    /// Keeps a rejected record in `rejected/`; `why` ends its file's name (`spool list`
    /// shows it), `code` by default.
    private func keepRejected(
        _ notification: VerifiedNotification, code: String, reason: String, why: String? = nil
    ) throws(Stop) -> SpoolReplayStep {
        // Durably before the spool moves past it; if that fails, the pass stops here.
        let path: String
        do throws(SpoolError) {
            path = try rejected.add(notification, reason: why ?? code)
        } catch {
            throw .rejectedRecordNotKept(error)
        }
        metrics.recordSpoolRejected()
        log.event(
            "spool_record_rejected", level: "error",
            [
                ("error", .string(code)), ("reason", .string(reason)), ("client_id", .string(notification.clientID)),
                ("type", .string(notification.type.name)), ("kept_in", .string(path)),
            ])
        return .rejected
    }

    /// Keeps Google's rejected record in `rejected/`, as `keepRejected` does Apple's.
    private func keepRejected(
        _ securityEvent: VerifiedSecurityEvent, code: String, reason: String, why: String? = nil
    ) throws(Stop) -> SpoolReplayStep {
        let path: String
        do throws(SpoolError) {
            path = try rejected.add(securityEvent, reason: why ?? code)
        } catch {
            throw .rejectedRecordNotKept(error)
        }
        metrics.recordSpoolRejected()
        log.event(
            "spool_record_rejected", level: "error",
            [
                ("error", .string(code)), ("reason", .string(reason)), ("provider", .string("google")),
                ("client_id", .string(securityEvent.clientIDs.first ?? "")),
                ("type", .string(securityEvent.events.first?.type.name ?? "")), ("kept_in", .string(path)),
            ])
        return .rejected
    }

    private func setBlocked(_ reason: String?) {
        let changed = blocked.withLock { current -> Bool in
            defer { current = reason }
            return current != reason
        }
        guard changed else { return }
        if let reason {
            log.event("spool_replay_blocked", level: "error", [("reason", .string(reason))])
        } else {
            log.event("spool_replay_unblocked")
        }
    }

    /// PING on the replayer's own connection. A refusal (NOAUTH, `max number of clients`)
    /// is reported as the cause; a Redis that does not answer is /healthz's own finding.
    private func redisAnswers() -> Bool {
        guard let error = store.withLock({ $0.value.probe() }) else { return true }
        setBlocked(
            error.isConnectionError ? nil : "Redis refuses the replayer's PING (\(error.replyKind)): \(error.message)")
        return false
    }

    /// Deletes rejected and torn files older than the retention, with a log line each.
    func expireOldFiles() {
        let expired = SpoolInspector.expire(
            spoolDirectory: spool.directory, olderThanDays: retentionDays, now: clock.wallSeconds())
        for file in expired {
            log.event(
                "spool_file_expired",
                [
                    ("kind", .string(file.kind)), ("file", .string(file.path)),
                    ("age_days", .integer(Int64(file.ageDays))), ("retention_days", .integer(Int64(retentionDays))),
                ])
        }
    }

    /// After a pass stopped on `TRYAGAIN` (a Redis Cluster slot being migrated, the script's
    /// keys split between two nodes): no pass before this long, whatever nudges come, so
    /// the replayer does not spin against the migration while requests keep spooling.
    static let slotMovingPause: Duration = .seconds(1)

    /// True when a pass stopped because the slot is being migrated (`TRYAGAIN`).
    static func stoppedBySlotMove(_ stop: Stop?) -> Bool {
        guard case .redis(let error)? = stop else { return false }
        return error.reply == .tryAgain
    }

    /// Runs until `requestStop()`: the first pass at once, then one a second (the poll
    /// interval counts on the monotonic clock: a wall clock stepped back must not hold the
    /// replay), or at once after a nudge, except within `slotMovingPause` of a pass that
    /// met `TRYAGAIN`.
    public func run() {
        var lastExpiry: ContinuousClock.Instant?
        var noPassBefore: ContinuousClock.Instant?
        var lastRequeueLook: ContinuousClock.Instant?
        task.run {
            scrubPending()
            scrubUsersDeletedInRedis()
            // Hourly on the injected monotonic clock (a test can move it).
            if lastExpiry.map({ clock.monotonic() - $0 > .seconds(3600) }) ?? true {
                expireOldFiles()
                lastExpiry = clock.monotonic()
            }
            if let noPassBefore, clock.monotonic() < noPassBefore { return noPassBefore - clock.monotonic() }
            spool.checkWritable()
            // Files `spool requeue` put back are looked for once a second, not at every
            // nudge: a live `account-deleted` nudges for its scrub, and a listing each was a
            // visible share of serve's time. Records in the segments are counted in memory.
            if spool.depth == 0, let lastRequeueLook, clock.monotonic() - lastRequeueLook < .seconds(1) {
                // The rest of the second only: a requeue is seen within about a second.
                return max(.milliseconds(1), lastRequeueLook + .seconds(1) - clock.monotonic())
            }
            if spool.depth == 0 { lastRequeueLook = clock.monotonic() }
            if !spool.hasWaitingRecords {
                setBlocked(nil)
            } else if redisAnswers() {
                // Ping first: a replay pass against a Redis that is down only churns segments.
                let report = replayOnce()
                noPassBefore = Self.stoppedBySlotMove(report.stop) ? clock.monotonic() + Self.slotMovingPause : nil
            }
            return .seconds(1)
        }
        // A scrub noted just before the stop is still done: the response said `applied`.
        scrubPending()
    }

    /// Wakes the service for an immediate pass (after a notification was spooled).
    public func nudge() { task.nudge() }

    /// Asks `run()` to return without waiting: a pass in progress ends after the record it
    /// is applying (that record is either applied and consumed, or left for next time).
    public func requestStop() { task.requestStop() }
}
