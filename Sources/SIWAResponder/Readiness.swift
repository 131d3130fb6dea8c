import SIWAJSON
import SIWASettings
import SIWASpool
import SIWASupport

/// Whether this instance can accept a notification and record it durably now, and if not,
/// why: the answer of `/healthz/ready`.
public struct Readiness: Sendable, Equatable {
    /// One failing condition, as `/healthz/ready` names it.
    public enum Reason: String, Sendable, CaseIterable {
        /// No Apple signing key is loaded (no cache, no fetch yet): every token would be a 503.
        case noSigningKeys = "no_signing_keys"
        /// Redis does not answer (named only together with `spoolUnwritable`).
        case redisUnreachable = "redis_unreachable"
        /// The spool cannot take a write (named only together with `redisUnreachable`).
        case spoolUnwritable = "spool_unwritable"
        /// More records wait than `SIWA_READY_SPOOL_MAX_DEPTH`.
        case spoolTooDeep = "spool_too_deep"
        /// The oldest waiting record is older than `SIWA_READY_SPOOL_MAX_AGE_SECONDS`.
        case spoolTooOld = "spool_too_old"
    }

    /// What was found, each part read only when the answer needs it.
    public struct Observation: Sendable, Equatable {
        var signingKeys: Int
        public var redisAnswers: Bool
        /// Nil when not looked at (Redis answered, so the spool's state did not matter).
        var spoolWritable: Bool?
        public var spoolDepth: Int
        /// Nil when not looked at (no age limit, or nothing waits) or unknown.
        var oldestRecordAge: Duration?

        public init(
            signingKeys: Int, redisAnswers: Bool, spoolWritable: Bool?, spoolDepth: Int, oldestRecordAge: Duration?
        ) {
            self.signingKeys = signingKeys
            self.redisAnswers = redisAnswers
            self.spoolWritable = spoolWritable
            self.spoolDepth = spoolDepth
            self.oldestRecordAge = oldestRecordAge
        }
    }

    public let reasons: [Reason]
    var isReady: Bool { reasons.isEmpty }

    /// The rule, in one place: keys loaded; Redis answering or the spool writable (a
    /// notification can be recorded durably in one of them); the spool within the limits.
    public init(_ observed: Observation, limits: ReadinessLimits) {
        var reasons: [Reason] = []
        if observed.signingKeys == 0 { reasons.append(.noSigningKeys) }
        if !observed.redisAnswers && observed.spoolWritable != true {
            reasons += [.redisUnreachable, .spoolUnwritable]
        }
        if limits.spoolMaximumDepth > 0 && observed.spoolDepth > limits.spoolMaximumDepth {
            reasons.append(.spoolTooDeep)
        }
        if limits.spoolMaximumAge > .zero, let age = observed.oldestRecordAge, age > limits.spoolMaximumAge {
            reasons.append(.spoolTooOld)
        }
        self.reasons = reasons
    }

    /// `{"status":"ready"}`, or `{"status":"not_ready","reasons":[...]}`.
    public var body: String {
        guard !isReady else { return JSONWriter.object([("status", .string("ready"))]) }
        return JSONWriter.object([
            ("status", .string("not_ready")), ("reasons", .array(reasons.map { .string($0.rawValue) })),
        ])
    }
}

extension NotificationResponder {
    /// `/healthz/live`: the process takes requests and a worker answers. No I/O: it stays 200
    /// through a Redis outage, a full spool or missing keys, which readiness reports instead.
    func liveness() -> Reply {
        Reply(status: 200, outcome: "live", body: JSONWriter.object([("status", .string("live"))]))
    }

    /// `/healthz/ready`: 200 when a notification can be accepted and recorded durably now,
    /// else 503 naming each failing condition. Redis gets the PING of /healthz, bounded at
    /// 80 ms at most (`ReadinessLimits.readinessPingTimeout`); the spool is written to (a
    /// small file, fsynced) only when Redis does not answer, and its oldest record read only
    /// when an age limit is set and records wait.
    func readiness() -> Reply {
        let limits = configuration.readiness
        let redisAnswers = breaker.health(within: limits.readinessPingTimeout).answers
        let depth = spool.depth
        let observed = Readiness.Observation(
            signingKeys: keys.usableKeyCount, redisAnswers: redisAnswers,
            spoolWritable: redisAnswers ? nil : spool.acceptsWrites(),
            spoolDepth: depth,
            oldestRecordAge: limits.spoolMaximumAge > .zero && depth > 0
                ? spool.oldestWaitingSpooledAt().map { .milliseconds(max(0, clock.wallMilliseconds() - $0)) } : nil)
        let readiness = Readiness(observed, limits: limits)
        return Reply(
            status: readiness.isReady ? 200 : 503,
            // "unhealthy" like a failing /healthz: a probe's 503 is not an answer to Apple,
            // and the 5xx alert leaves it out.
            outcome: readiness.isReady ? "ready" : "unhealthy", body: readiness.body,
            // The line written when the answer changes names the reasons.
            logFields: readiness.isReady ? [] : [("reasons", .array(readiness.reasons.map { .string($0.rawValue) }))])
    }
}

extension NotificationResponder {
    /// `siwa_spool_oldest_age_seconds`: how long the first waiting record has waited (0
    /// when none waits), read from the spool only while records wait.
    func spoolAgeMetricsText() -> String {
        let spooledAt = spool.depth > 0 ? spool.oldestWaitingSpooledAt() : nil
        let age = spooledAt.map { max(0, clock.wallMilliseconds() - $0) / 1000 } ?? 0
        return """
            # HELP siwa_spool_oldest_age_seconds Seconds the oldest record waiting in the spool has waited (0: none waits).
            # TYPE siwa_spool_oldest_age_seconds gauge
            siwa_spool_oldest_age_seconds \(age)

            """
    }
}

extension NotificationResponder {
    /// The probes' paths, beside `/healthz`.
    static let livenessPath = "/healthz/live"
    static let readinessPath = "/healthz/ready"
}
