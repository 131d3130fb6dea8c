import Foundation
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWAStore
import SIWASupport
import SIWATelemetry

/// Delivers the events stream to one destination, on a thread of its own and with a Redis
/// connection of its own, so a slow or dead destination delays no other.
///
/// Order within a destination: new events are tried at once, in stream order; one that fails
/// waits for its next attempt (the retry schedule) while later events go on, so one failing
/// event never blocks the others (no head-of-line blocking). Ordering is therefore not
/// promised: the body carries Apple's `event_time`, by which receivers apply. At most
/// `maximumHeld` events wait for a retry at once; beyond that, new events wait unread in the
/// stream (which keeps them: see the trimming rule in docs/contract.md).
// Unchecked: its `private var`s (the events held for a retry, the pauses and last times) are
// read and written by `run()`'s thread alone; other threads only ask for the stop, through a Latch.
public final class WebhookDestinationWorker: Service, @unchecked Sendable {
    /// The retry schedule: the delay before each attempt after the first (about three days in all).
    public static let schedule: [Duration] = [
        .seconds(5), .seconds(300), .seconds(1800), .seconds(7200), .seconds(18_000), .seconds(36_000),
        .seconds(50_400), .seconds(72_000), .seconds(86_400),
    ]
    /// Attempts in all: the first, then one per delay of the schedule.
    static var maximumAttempts: Int { schedule.count + 1 }
    /// The longest `Retry-After` honoured (scaled like the schedule).
    static let retryAfterCap: Duration = .seconds(3600)
    static let maximumHeld = 1000

    public let destination: WebhookDestination
    public var name: String { "deliver-" + destination.name }
    let poster: WebhookPoster
    let makeConnection: @Sendable () -> RedisConnection
    let keyPrefix: String
    let consumer: String
    let claimIdle: Duration
    let retryScale: Double
    let metrics: WebhookMetrics
    private let stopRequested = Latch()

    struct Held {
        let event: WebhookEvent
        var attempts: Int
        var nextAttemptAt: Int64
    }

    private var held: [String: Held] = [:]
    private var pausedUntil: Int64 = 0
    private var lastTouch: Int64 = 0
    private var lastClaim: Int64 = 0
    private var lastBacklog: Int64 = 0
    private var lastDisabledCheck: Int64 = 0
    private var disabled = false
    private var redisDown = false
    /// The last refusal logged (Redis's reply), so that a refusal is logged once, not per retry.
    private var lastRefusal: String?

    public init(
        destination: WebhookDestination, poster: WebhookPoster, keyPrefix: String, consumer: String,
        claimIdle: Duration, retryScale: Double, metrics: WebhookMetrics,
        makeConnection: @escaping @Sendable () -> RedisConnection
    ) {
        self.destination = destination
        self.poster = poster
        self.keyPrefix = keyPrefix
        self.consumer = consumer
        self.claimIdle = claimIdle
        self.retryScale = retryScale
        self.metrics = metrics
        self.makeConnection = makeConnection
    }

    public func requestStop() { stopRequested.open() }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    var claimIdleMilliseconds: Int64 {
        claimIdle.components.seconds * 1000 + claimIdle.components.attoseconds / 1_000_000_000_000_000
    }

    public func run() {
        let store = WebhookDeliveryStore(
            connection: makeConnection(), keyPrefix: keyPrefix, destination: destination.name)
        var started = false
        while !stopRequested.hasOpened {
            do throws(RedisError) {
                if !started {
                    try store.ensureGroups(deletions: destination.takesDeletions)
                    let ownPending = try store.readOwnPending(consumer: consumer, count: Self.maximumHeld)
                    for entry in ownPending { try take(entry, store: store) }
                    started = true
                    // Its group exists from here on: every event recorded after this line is
                    // the destination's (one recorded before its group was first made is not:
                    // the group begins at the stream's end; `deliver replay` sends those).
                    EventLog.event(
                        "webhook_destination_reading",
                        [("destination", .string(destination.name)), ("resumed", .integer(Int64(ownPending.count)))])
                }
                try step(store)
                if redisDown {
                    redisDown = false
                    lastRefusal = nil
                    EventLog.event("webhook_redis_available", [("destination", .string(destination.name))])
                }
            } catch {
                // Redis answered and refuses (NOPERM: a Redis user without the deliverer's
                // rights; WRONGPASS; a key of another type): a deployment mistake that no
                // retry mends, logged as an error with Redis's reply, unlike an outage.
                let refused = error.isLoginRefused || (!error.isTransient && error.code == .serverError)
                if refused, lastRefusal != error.message {
                    redisDown = true
                    lastRefusal = error.message
                    EventLog.event(
                        "webhook_redis_refused", level: "error",
                        [
                            ("destination", .string(destination.name)), ("error", .string(error.code.rawValue)),
                            ("reply", .string(error.replyKind)), ("message", .string(error.operatorMessage)),
                        ])
                } else if !redisDown {
                    redisDown = true
                    EventLog.event(
                        "webhook_redis_unavailable", level: "warning",
                        [("destination", .string(destination.name)), ("error", .string(error.code.rawValue))])
                }
                store.connection.disconnect()
                _ = stopRequested.wait(until: .now + .milliseconds(200))
            }
        }
        poster.closeConnection()
    }

    /// One turn: the housekeeping that is due, then one attempt or one read of new events.
    private func step(_ store: WebhookDeliveryStore) throws(RedisError) {
        // A turn with nothing to post waits 500 ms at most, so an idle connection is closed soon after its bound.
        poster.closeIdleConnection()
        var now = Self.now()
        if now - lastDisabledCheck >= 1000 || disabled {
            lastDisabledCheck = now
            let isDisabled = try store.isDisabled()
            if isDisabled != disabled {
                disabled = isDisabled
                metrics.setDisabled(destination.name, isDisabled)
                if !isDisabled {
                    EventLog.event("webhook_destination_enabled", [("destination", .string(destination.name))])
                    for id in held.keys { held[id]?.nextAttemptAt = now }
                }
            }
        }
        if now - lastBacklog >= 1000 {
            lastBacklog = now
            let backlog = try store.backlog()
            metrics.setBacklog(
                destination.name, pending: backlog.pending,
                oldestAgeSeconds: backlog.oldestAt.map { Double(max(0, now - $0)) / 1000 } ?? 0)
        }
        let idle = claimIdleMilliseconds
        if !held.isEmpty, now - lastTouch >= idle / 3 {
            lastTouch = now
            try store.touch(consumer: consumer, ids: Array(held.keys))
        }
        if disabled {
            _ = stopRequested.wait(until: .now + .milliseconds(500))
            return
        }
        if now - lastClaim >= idle / 2, held.count < Self.maximumHeld {
            lastClaim = now
            for entry in try store.claimIdle(
                consumer: consumer, idleMilliseconds: Int(idle), count: Self.maximumHeld - held.count)
            {
                try take(entry, store: store)
            }
        }
        now = Self.now()
        if pausedUntil > now {
            _ = stopRequested.wait(until: .now + .milliseconds(min(200, pausedUntil - now)))
            return
        }
        if let due = held.values.filter({ $0.nextAttemptAt <= now }).min(by: { $0.nextAttemptAt < $1.nextAttemptAt }) {
            try attempt(due, store: store)
            return
        }
        let nextDue = held.values.map(\.nextAttemptAt).min().map { $0 - now } ?? Int64.max
        if held.count < Self.maximumHeld {
            let block = Int(max(1, min(200, nextDue)))
            for entry in try store.readNew(consumer: consumer, count: 10, blockMilliseconds: block) {
                try take(entry, store: store, neverDelivered: true)
            }
        } else {
            _ = stopRequested.wait(until: .now + .milliseconds(max(1, min(200, nextDue))))
        }
    }

    /// An entry now held by this consumer: kept for delivery (with its retry state, when
    /// another deliverer left one), or acknowledged at once when it is not this destination's.
    /// `neverDelivered`: read as new (`>`), so no deliverer has attempted it and it has no
    /// retry state to look up (one Redis round trip less per event).
    private func take(
        _ entry: (id: String, fields: [String: String]), store: WebhookDeliveryStore, neverDelivered: Bool = false
    ) throws(RedisError) {
        guard let event = WebhookEvent(entryID: entry.id, fields: entry.fields) else {
            EventLog.event(
                "webhook_entry_malformed", level: "warning",
                [("destination", .string(destination.name)), ("entry_id", .string(entry.id))])
            try store.acknowledge(entry.id)
            return
        }
        guard destination.wants(event) else {
            if event.provider == "apple", event.type == "account-deleted", destination.takesDeletions {
                try store.acknowledgeDeletion(
                    tokenID: event.tokenID, recordedAt: event.recordedAt ?? 0, consumer: consumer)
            }
            try store.acknowledge(entry.id)
            return
        }
        let retry = neverDelivered ? nil : try store.retryState(entry.id)
        held[entry.id] = Held(
            event: event, attempts: retry?.attempts ?? 0, nextAttemptAt: retry?.nextAttemptAt ?? Self.now())
    }

    private func attempt(_ item: Held, store: WebhookDeliveryStore) throws(RedisError) {
        let event = item.event
        let email =
            event.isEmailEvent && destination.includeEmail
            ? try store.email(clientID: event.clientID, subject: event.subject) : nil
        let message = WebhookMessage(event: event, email: email)
        metrics.attempted(destination.name)
        let started = Self.now()
        let outcome = poster.post(message, timestamp: started / 1000)
        let now = Self.now()
        let attempts = item.attempts + 1
        let identity: [(String, JSONValue)] = [
            ("destination", .string(destination.name)), ("webhook_id", .string(message.id)),
            ("type", .string(event.destinationType)), ("client_id", .string(event.clientID)),
            ("attempt", .integer(Int64(attempts))),
        ]
        switch outcome {
        case .delivered(let status):
            if event.provider == "apple", event.type == "account-deleted" {
                try store.acknowledgeDeletion(
                    tokenID: event.tokenID, recordedAt: event.recordedAt ?? 0, consumer: consumer)
            }
            try store.acknowledge(event.entryID)
            held[event.entryID] = nil
            try store.recordSuccess(at: now)
            let latency = Double(max(0, now - (event.recordedAt ?? now))) / 1000
            metrics.delivered(destination.name, latencySeconds: latency)
            EventLog.event(
                "webhook_delivered",
                identity + [("status", .integer(Int64(status))), ("duration_ms", .integer(now - started))])
        case .failed(let cause, let status, let retryAfter):
            metrics.failed(destination.name, cause: cause)
            try store.recordFailure(at: now, cause: cause, status: status)
            EventLog.event(
                "webhook_attempt_failed", level: "warning",
                identity + [("cause", .string(cause)), ("status", status.map { .integer(Int64($0)) } ?? .null)])
            if cause == "gone" {
                try store.disable(reason: "410 Gone", at: now)
                disabled = true
                metrics.setDisabled(destination.name, true)
                EventLog.event(
                    "webhook_destination_disabled", level: "error",
                    [("destination", .string(destination.name)), ("reason", .string("410 Gone"))])
                held[event.entryID]?.attempts = attempts
                try store.recordRetry(event.entryID, attempts: attempts, nextAttemptAt: now)
                return
            }
            if attempts >= Self.maximumAttempts {
                try store.recordExhausted(event, attempts: attempts, cause: cause)
                held[event.entryID] = nil
                metrics.exhausted(destination.name)
                EventLog.event("webhook_exhausted", level: "error", identity + [("cause", .string(cause))])
                return
            }
            var next = now + scaled(Self.schedule[attempts - 1], jitter: true)
            if let retryAfter {
                let wait = min(Int64(retryAfter * 1000), scaled(Self.retryAfterCap, jitter: false))
                pausedUntil = max(pausedUntil, now + wait)
                next = max(next, now + wait)
            }
            held[event.entryID]?.attempts = attempts
            held[event.entryID]?.nextAttemptAt = next
            try store.recordRetry(event.entryID, attempts: attempts, nextAttemptAt: next)
        }
    }

    /// `delay` × the retry scale, in ms, with ±10 % jitter when asked.
    func scaled(_ delay: Duration, jitter: Bool) -> Int64 {
        let milliseconds = Double(delay.components.seconds) * 1000 * retryScale
        let factor = jitter ? Double.random(in: 0.9...1.1) : 1
        return Int64((milliseconds * factor).rounded())
    }
}
