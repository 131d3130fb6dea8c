import SIWAFastCGI
import Synchronization

/// Counters for `GET /metrics`, in the Prometheus text format. Shared by every worker.
public final class ServerMetrics: Sendable {
    struct RequestKey: Hashable {
        let status: Int
        let outcome: String
        let type: String
        let code: String
    }

    struct State {
        var requests: [RequestKey: Int] = [:]
        var durationBuckets: [Int]
        var durationSum: Double = 0
        var durationCount = 0
        var redisErrors = 0
        var spoolReplayed = 0
        var tornSpoolRecords = 0
        var rejectedSpoolRecords = 0
        var replicaShortfalls = 0
        /// Probe answers, by path and status: apart from `requests`, which counts traffic.
        var probes: [ProbeKey: Int] = [:]
        /// Connections the FastCGI acceptor closed without a worker, by reason.
        var fastCGIRefusals: [FastCGIRefusal: Int] = [:]
    }

    struct ProbeKey: Hashable {
        let path: String
        let status: Int
    }

    /// Upper bounds of the request-duration histogram, in seconds.
    public static let durationBounds: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]

    private let state = Mutex(State(durationBuckets: Array(repeating: 0, count: durationBounds.count)))

    public init() {}

    /// One finished request. `type` is the normalised notification type, or "" when none.
    public func recordRequest(status: Int, outcome: String, type: String, code: String, seconds: Double) {
        state.withLock { state in
            state.requests[RequestKey(status: status, outcome: outcome, type: type, code: code), default: 0] += 1
            for (index, bound) in Self.durationBounds.enumerated() where seconds <= bound {
                state.durationBuckets[index] += 1
            }
            state.durationSum += seconds
            state.durationCount += 1
        }
    }

    /// One probe answer (`/healthz`, `/healthz/live`, `/healthz/ready`): counted here, not
    /// in `siwa_requests_total` nor the duration histogram, so that a balancer's and an
    /// orchestrator's probes every few seconds do not drown the traffic they are beside.
    public func recordProbe(path: String, status: Int) {
        state.withLock { $0.probes[ProbeKey(path: path, status: status), default: 0] += 1 }
    }

    /// A connection the FastCGI acceptor closed without a worker.
    public func recordFastCGIRefusal(_ refusal: FastCGIRefusal) {
        state.withLock { $0.fastCGIRefusals[refusal, default: 0] += 1 }
    }

    public func recordRedisError() { state.withLock { $0.redisErrors += 1 } }
    public func recordSpoolReplayed(_ count: Int) { state.withLock { $0.spoolReplayed += count } }
    public func recordTornSpoolRecords(_ count: Int) { state.withLock { $0.tornSpoolRecords += count } }
    public func recordSpoolRejected() { state.withLock { $0.rejectedSpoolRecords += 1 } }
    public func recordReplicaShortfall() { state.withLock { $0.replicaShortfalls += 1 } }

    /// The exposition text. Gauges owned elsewhere are passed in.
    public func render(spoolDepth: Int, jwksAgeSeconds: Double?, jwksRefreshFailures: Int, jwksKeys: Int) -> String {
        let snapshot = state.withLock { $0 }
        var lines: [String] = []
        lines.append(
            "# HELP siwa_requests_total Requests answered, by status, outcome, notification type and error code.")
        lines.append("# TYPE siwa_requests_total counter")
        let sorted = snapshot.requests.sorted {
            ($0.key.status, $0.key.outcome, $0.key.type, $0.key.code) < (
                $1.key.status, $1.key.outcome, $1.key.type, $1.key.code
            )
        }
        for (key, count) in sorted {
            lines.append(
                #"siwa_requests_total{status="\#(key.status)",outcome="\#(Self.labelValue(key.outcome))",type="\#(Self.labelValue(key.type))",code="\#(Self.labelValue(key.code))"} \#(count)"#
            )
        }
        lines.append(
            "# HELP siwa_probe_answers_total Answers to /healthz, /healthz/live and /healthz/ready, by path and status."
        )
        lines.append("# TYPE siwa_probe_answers_total counter")
        for (key, count) in snapshot.probes.sorted(by: { ($0.key.path, $0.key.status) < ($1.key.path, $1.key.status) })
        {
            lines.append(#"siwa_probe_answers_total{path="\#(key.path)",status="\#(key.status)"} \#(count)"#)
        }
        lines.append(
            "# HELP siwa_fastcgi_refused_total FastCGI connections closed unanswered, without a worker, by reason.")
        lines.append("# TYPE siwa_fastcgi_refused_total counter")
        for refusal in FastCGIRefusal.allCases {
            lines.append(
                #"siwa_fastcgi_refused_total{reason="\#(refusal.rawValue)"} \#(snapshot.fastCGIRefusals[refusal] ?? 0)"#
            )
        }
        lines.append("# HELP siwa_request_duration_seconds Time from request to response, in the responder.")
        lines.append("# TYPE siwa_request_duration_seconds histogram")
        for (index, bound) in Self.durationBounds.enumerated() {
            lines.append(#"siwa_request_duration_seconds_bucket{le="\#(bound)"} \#(snapshot.durationBuckets[index])"#)
        }
        lines.append(#"siwa_request_duration_seconds_bucket{le="+Inf"} \#(snapshot.durationCount)"#)
        lines.append("siwa_request_duration_seconds_sum \(snapshot.durationSum)")
        lines.append("siwa_request_duration_seconds_count \(snapshot.durationCount)")
        lines.append(
            "# HELP siwa_redis_errors_total Redis commands that failed (the notification was spooled or refused).")
        lines.append("# TYPE siwa_redis_errors_total counter")
        lines.append("siwa_redis_errors_total \(snapshot.redisErrors)")
        lines.append("# HELP siwa_spool_depth Verified notifications waiting in the spool for Redis.")
        lines.append("# TYPE siwa_spool_depth gauge")
        lines.append("siwa_spool_depth \(spoolDepth)")
        lines.append("# HELP siwa_spool_replayed_total Spooled notifications applied to Redis.")
        lines.append("# TYPE siwa_spool_replayed_total counter")
        lines.append("siwa_spool_replayed_total \(snapshot.spoolReplayed)")
        lines.append("# HELP siwa_spool_torn_records_total Torn or corrupt spool records, moved to .torn files.")
        lines.append("# TYPE siwa_spool_torn_records_total counter")
        lines.append("siwa_spool_torn_records_total \(snapshot.tornSpoolRecords)")
        lines.append(
            "# HELP siwa_spool_rejected_total Rejected spool records (refused by Redis), kept in rejected/.")
        lines.append("# TYPE siwa_spool_rejected_total counter")
        lines.append("siwa_spool_rejected_total \(snapshot.rejectedSpoolRecords)")
        lines.append(
            "# HELP siwa_redis_replica_shortfalls_total Writes fewer replicas than SIWA_REDIS_MIN_REPLICAS acknowledged in time (a copy was spooled)."
        )
        lines.append("# TYPE siwa_redis_replica_shortfalls_total counter")
        lines.append("siwa_redis_replica_shortfalls_total \(snapshot.replicaShortfalls)")
        lines.append("# HELP siwa_jwks_age_seconds Seconds since Apple's keys were last fetched or loaded.")
        lines.append("# TYPE siwa_jwks_age_seconds gauge")
        lines.append("siwa_jwks_age_seconds \(jwksAgeSeconds.map { String($0) } ?? "NaN")")
        lines.append("# HELP siwa_jwks_keys Usable keys in the current JWKS.")
        lines.append("# TYPE siwa_jwks_keys gauge")
        lines.append("siwa_jwks_keys \(jwksKeys)")
        lines.append("# HELP siwa_jwks_refresh_failures_total JWKS fetches that failed (the last good keys were kept).")
        lines.append("# TYPE siwa_jwks_refresh_failures_total counter")
        lines.append("siwa_jwks_refresh_failures_total \(jwksRefreshFailures)")
        return lines.joined(separator: "\n") + "\n"
    }

    /// A Prometheus label value: backslash, double quote and line feed escaped as the text
    /// format defines; every other control character (carriage return included) written as
    /// the visible text `\u000D`, since the format has no escape for it and a raw one can
    /// end the line for some readers. Per Unicode scalar, not per `Character`: "\r\n" is one
    /// Character, and matching it as a whole let a raw line break through.
    package static func labelValue(_ text: String) -> String {
        var escaped = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            case _
            where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar == "\u{2028}"
                || scalar == "\u{2029}":
                let hex = String(scalar.value, radix: 16, uppercase: true)
                escaped += "\\\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }
}
