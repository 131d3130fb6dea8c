import Foundation
import SIWAFastCGI
import SIWAJSON
import SIWAKeys
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWASpool
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWAVerification

/// The request path, top to bottom: route → body → verification (keys by kid, refreshed
/// on an unknown kid) → state change in Redis, or the spool when Redis cannot take it →
/// one JSON response and one log line.
public final class NotificationResponder: Sendable {
    public let configuration: ServerConfiguration
    private let verifier: NotificationVerifier
    let keys: JWKSProvider
    let stores: NotificationStorePool
    let spool: NotificationSpool
    /// The service that drains the spool into Redis (nil: nothing drains it, as in tests).
    let drain: (any SpoolDraining)?
    public let metrics: ServerMetrics
    /// Wall time for token expiry, receive times and the JWKS age; monotonic time for
    /// request durations and the circuit breaker.
    let clock: EndpointClock
    /// The Redis topology, located: with Sentinel or Cluster, names the primary in /healthz
    /// and counts discoveries (and redirections) in /metrics.
    let redisLocator: RedisLocator
    /// Redis counts as down for a while after a call could not reach it: requests spool at once.
    public let breaker: RedisCircuitBreaker
    /// The last reading of the deletions stream, for /metrics (nil: no deletion figures).
    let deletionDuty: DeletionDutyMonitor?
    /// Per client ID: genuine notifications, the last one's time, refusals by reason.
    public let clientTraffic: ClientTraffic
    /// `P:clients`, the silence figures' record: the one Redis write of a request besides the
    /// notification's own (at most once a minute per client ID), and the read the loader makes.
    public let clientActivity: ClientActivityRecord
    /// Google's Cross-Account Protection (nil: not served, its path is a 404).
    public let google: SecurityEventReceiver?
    /// Where its lines go: each request's, and what it sees happen.
    let log: EventLog.Sink
    /// Each probe path's last answer: its line is written when that changes.
    let probeAnswers = ProbeAnswerLog()

    /// The parts come built and wired (see serve's `ServeAssembly`): the responder starts
    /// nothing and builds nothing.
    public init(
        configuration: ServerConfiguration, verifier: NotificationVerifier, keys: JWKSProvider,
        breaker: RedisCircuitBreaker, stores: NotificationStorePool, spool: NotificationSpool,
        drain: (any SpoolDraining)?, metrics: ServerMetrics, clock: EndpointClock = .system,
        redisLocator: RedisLocator = .single, deletionDuty: DeletionDutyMonitor? = nil,
        google: SecurityEventReceiver? = nil, log: EventLog.Sink = .standardError
    ) {
        self.log = log
        self.google = google
        self.configuration = configuration
        self.verifier = verifier
        self.keys = keys
        self.breaker = breaker
        self.stores = stores
        self.spool = spool
        self.drain = drain
        self.metrics = metrics
        self.clock = clock
        self.redisLocator = redisLocator
        self.deletionDuty = deletionDuty
        self.clientTraffic = ClientTraffic(
            silenceAlertSeconds: configuration.silence.alertSeconds(clientIDs: configuration.clientIDs),
            startedAt: clock.wallMilliseconds())
        self.clientActivity = ClientActivityRecord(
            traffic: clientTraffic, stores: stores, breaker: breaker, clock: clock, log: log)
    }

    /// What one request came to, for the response, the metrics and the log line.
    struct Reply {
        var status: Int
        var outcome: String
        var errorCode: String? = nil
        var type: String? = nil
        var clientID: String? = nil
        var body: String
        var contentType = "application/json"
        var headers: [FastCGIResponse.Header] = []
        /// More fields for the request's log line (numbers only, never token content).
        var logFields: [(String, JSONValue)] = []
    }

    public func handle(_ request: FastCGIRequest) -> FastCGIResponse {
        let started = clock.monotonic()
        let result = route(request)
        if result.status == 200, request.path == configuration.requests.notificationPath,
            let clientID = result.clientID
        {
            clientActivity.recordGenuine(clientID: clientID, stored: result.outcome != "spooled")
        }
        let elapsed = clock.monotonic() - started
        let seconds = elapsed.inSeconds
        func writeLine(_ extra: [(String, JSONValue)] = []) {
            log.request(
                requestID: request.requestID ?? "-", method: request.method, path: Self.loggablePath(request.path),
                status: result.status, outcome: result.outcome, errorCode: result.errorCode, type: result.type,
                clientID: result.clientID, durationMilliseconds: seconds * 1000, extra: result.logFields + extra)
        }
        if Self.isProbe(request) {
            // Counted apart from the traffic, and a line only when its answer changes.
            metrics.recordProbe(path: request.path, status: result.status)
            let answer = ProbeAnswerLog.Answer(
                status: result.status, detail: result.status == 200 ? "" : JSONWriter.object(result.logFields))
            if let previous = probeAnswers.change(path: request.path, to: answer) {
                writeLine([("previous_status", .integer(Int64(previous.status)))])
            }
        } else {
            metrics.recordRequest(
                status: result.status, outcome: result.outcome, type: result.type ?? "", code: result.errorCode ?? "",
                seconds: seconds)
            if request.path == configuration.requests.notificationPath || result.status >= 500
                || (google != nil && request.path == google?.settings.path)
            {
                writeLine()
            }
        }
        var headers = result.headers
        if result.status == 503 { headers.append(retryAfter) }
        headers.append(FastCGIResponse.Header("Cache-Control", "no-store"))
        if result.contentType.isEmpty {
            // RFC 8935's 202: no body, so no Content-Type.
            return FastCGIResponse(status: result.status, headers: headers, body: Array(result.body.utf8))
        }
        return FastCGIResponse(
            status: result.status, contentType: result.contentType, body: result.body, headers: headers)
    }

    /// A probe: `/healthz`, `/healthz/live` or `/healthz/ready` asked with GET or HEAD
    /// (any other method on them is a 405 like any other request's).
    static func isProbe(_ request: FastCGIRequest) -> Bool {
        (request.path == "/healthz" || request.path == livenessPath || request.path == readinessPath)
            && (request.method == "GET" || request.method == "HEAD")
    }

    func route(_ request: FastCGIRequest) -> Reply {
        if let google, request.path == google.settings.path {
            guard request.method == "POST" else {
                return Self.status(405, "method_not_allowed", headers: [.init("Allow", "POST")])
            }
            return receiveSecurityEvent(request, google)
        }
        switch (request.path, request.method) {
        case (configuration.requests.notificationPath, "POST"): return receive(request.body)
        case ("/healthz", "GET"), ("/healthz", "HEAD"): return health()
        case (Self.livenessPath, "GET"), (Self.livenessPath, "HEAD"): return liveness()
        case (Self.readinessPath, "GET"), (Self.readinessPath, "HEAD"): return readiness()
        case ("/metrics", "GET"), ("/metrics", "HEAD"): return metricsText()
        case (configuration.requests.notificationPath, _):
            return Self.status(405, "method_not_allowed", headers: [.init("Allow", "POST")])
        case ("/healthz", _), ("/metrics", _), (Self.livenessPath, _), (Self.readinessPath, _):
            return Self.status(405, "method_not_allowed", headers: [.init("Allow", "GET, HEAD")])
        default: return Self.status(404, "not_found")
        }
    }

    func receive(_ body: FastCGIRequest.Body) -> Reply {
        let bytes: [UInt8]
        switch body {
        case .complete(let complete): bytes = complete
        case .tooLarge:
            clientTraffic.recordRefusal(label: ClientTraffic.noneLabel, reason: .malformed)
            return refusal(VerificationError(.bodyTooLarge, "the body is over the limit"))
        case .incomplete:
            // The peer went away mid-body: nothing to decide, nothing stored.
            clientTraffic.recordRefusal(label: ClientTraffic.noneLabel, reason: .malformed)
            return Self.status(400, "refused", errorCode: "body_incomplete")
        }

        let notification: VerifiedNotification
        do {
            notification = try verifier.verify(body: bytes, keys: keys, now: clock.wallSeconds())
        } catch {
            let reason = ClientTraffic.RefusalReason(error.code)
            // A body that is not a well-formed token (most internet noise) is not parsed again.
            let audience = reason == .malformed ? nil : verifier.unverifiedAudience(of: bytes)
            clientTraffic.recordRefusal(label: clientTraffic.label(ofAudience: audience), reason: reason)
            var refused = refusal(error)
            // The signature checked out before the audience: this `aud` is Apple's, the
            // client ID missing from SIWA_CLIENT_IDS, and the operator needs its name.
            if error.code == .audNotServed, let audience, audience.utf8.count <= 255 {
                refused.logFields.append(("aud", .string(audience)))
            }
            return refused
        }

        var result = Reply(
            status: 200, outcome: "", type: notification.type.name, clientID: notification.clientID, body: "")
        if notification.type == .unknown {
            // Loud on purpose: a new type from Apple is news for the team.
            log.event(
                "unknown_notification_type", level: "warning",
                [("raw_type", .string(notification.rawType)), ("client_id", .string(notification.clientID))])
        }
        if breaker.isOpen {
            // Redis did not answer a moment ago: no worker waits on it again until the probe
            // finds it back.
            result.logFields = [("redis_circuit", .string("open"))]
            return spoolInstead(notification, result)
        }
        // The seen marker's value if the script runs: a spooled record keeps it, so that a call
        // that timed out but ran after all is replayed as `stored`, not `duplicate`.
        let receivedAt = clock.wallMilliseconds()
        do {
            let acknowledged = try stores.withStore { store throws(RedisError) in
                try store.applyAcknowledged(notification, receivedAt: receivedAt, earlierAttempt: nil)
            }
            result.outcome = acknowledged.outcome.rawValue
            if acknowledged.isShortfall || acknowledged.replicaCheckRefusal != nil,
                let unavailable = keepCopy(notification, acknowledged, result)
            {
                return unavailable
            }
            drain?.queueSetAsideScrub(after: notification)
            if notification.type == .accountDeleted { deletionDuty?.nudge() }
        } catch {
            metrics.recordRedisError()
            if error.isRecordSpecific { return recordRefused(error, result) }
            recordDeploymentFailure(error)
            return spoolInstead(notification, result, attemptedAt: receivedAt)
        }
        result.body = Self.json(status: result.outcome)
        return result
    }

    /// Redis refuses this one record for a reason about the record (its user key holds
    /// another type, its sub would break the key layout). A replay could only set it aside,
    /// so it is not spooled and not answered 200: 503 `store_refused`, nothing written, and
    /// Apple's retries find it stored once an operator has removed the cause.
    /// A Redis error about the deployment, not the record (either provider's write): one
    /// `redis_error` line, and the breaker told, before the record goes to the spool.
    func recordDeploymentFailure(_ error: RedisError) {
        log.event(
            "redis_error", level: "warning",
            [("error", .string(error.code.rawValue)), ("reply", .string(error.replyKind))])
        breaker.recordFailure(error)
    }

    func recordRefused(_ error: RedisError, _ result: Reply) -> Reply {
        log.event(
            "redis_record_refused", level: "error",
            [
                ("error", .string(error.code.rawValue)), ("reason", .string(error.operatorMessage)),
                ("client_id", result.clientID.map { .string($0) } ?? .null),
            ])
        return Self.unavailable(result, errorCode: "store_refused")
    }

    /// Redis cannot take it now: the spool does (fsync'd), or the answer is a 503.
    func spoolInstead(_ notification: VerifiedNotification, _ result: Reply, attemptedAt: Int64? = nil) -> Reply {
        var result = result
        do {
            try spool.append(notification, attemptedAt: attemptedAt)
            result.outcome = "spooled"
            drain?.nudge()
        } catch {
            return storeUnavailable(result, error)
        }
        result.body = Self.json(status: result.outcome)
        return result
    }

    func health() -> Reply {
        let keyCount = keys.usableKeyCount
        let redis = breaker.health(within: configuration.readiness.healthPingTimeout)
        let redisAnswers = redis.answers
        let depth = spool.depth
        var reasons: [String] = []
        if keyCount == 0 { reasons.append("no Apple signing keys loaded") }
        if let refusal = redis.tlsRefusal {
            reasons.append("Redis does not answer: redis_tls_refused: \(refusal.reason) (look at \(refusal.setting))")
        } else if !redisAnswers {
            reasons.append("Redis does not answer")
        }
        if let blocked = drain?.blockedReason { reasons.append("spool replay blocked: \(blocked)") }
        if let problem = spool.writeProblem { reasons.append("the spool cannot take writes: \(problem.description)") }
        let members: [(String, JSONValue)] =
            [
                ("status", .string(reasons.isEmpty ? "ok" : "unavailable")),
                ("keys", .integer(Int64(keyCount))), ("redis", .string(redisAnswers ? "ok" : "down")),
                ("spool_depth", .integer(Int64(depth))),
            ] + googleHealthMembers()
        return Reply(
            status: reasons.isEmpty ? 200 : 503, outcome: reasons.isEmpty ? "healthy" : "unhealthy",
            body: JSONWriter.object(
                members + Self.circuitMembers(redis) + redisPrimaryMembers()
                    + (reasons.isEmpty ? [] : [("reason", .string(reasons.joined(separator: "; ")))])),
            // The line written when the answer changes says why (a change of reason is a change).
            logFields: reasons.isEmpty ? [] : [("reason", .string(reasons.joined(separator: "; ")))])
    }

    /// Google's part of /healthz, when Google is served: whether its keys (and the issuer
    /// that comes with them) are loaded. Never a reason for 503: a Google outage must not take
    /// Apple's notifications out of a load balancer (`SIWAGoogleKeysMissing` watches it).
    func googleHealthMembers() -> [(String, JSONValue)] {
        guard let google else { return [] }
        let keyCount = google.keys.usableKeyCount
        let ready = keyCount > 0 && google.keys.keys.issuer != nil
        return [
            (
                "google",
                .object([
                    "status": .string(ready ? "ok" : "no keys"), "keys": .integer(Int64(keyCount)),
                ])
            )
        ]
    }

    func metricsText() -> Reply {
        let jwks = keys.metrics(now: clock.wallSeconds())
        let text = metrics.render(
            spoolDepth: spool.depth, jwksAgeSeconds: jwks.ageSeconds.map(Double.init),
            jwksRefreshFailures: jwks.refreshFailures, jwksKeys: jwks.usableKeyCount)
        return Reply(
            status: 200, outcome: "metrics",
            body: text + keys.metricsText() + redisLocator.metricsText()
                + (deletionDuty?.metricsText(now: clock.wallMilliseconds()) ?? "")
                + ServerMetrics.renderClients(clientTraffic, now: clock.wallMilliseconds())
                + (google.map { ServerMetrics.renderGoogleClients($0, now: clock.wallMilliseconds()) } ?? "")
                + spoolAgeMetricsText(),
            contentType: "text/plain; version=0.0.4")
    }

    func refusal(_ error: VerificationError) -> Reply {
        let retryable = error.failureClass == .retryable
        var result = Reply(
            status: Self.httpStatus(for: error), outcome: retryable ? "unavailable" : "refused",
            errorCode: error.code.rawValue,
            body: Self.json(status: retryable ? "unavailable" : "refused", error: error.code.rawValue))
        // A token from the future usually means this host's clock is behind: show both times.
        if let issuedAt = error.issuedAt, let serverTime = error.serverTime {
            result.logFields = [("iat", .integer(issuedAt)), ("server_time", .integer(serverTime))]
        }
        return result
    }

    static func status(
        _ status: Int, _ name: String, errorCode: String? = nil, headers: [FastCGIResponse.Header] = []
    ) -> Reply {
        Reply(
            status: status, outcome: name, errorCode: errorCode, body: json(status: name, error: errorCode),
            headers: headers)
    }

    /// `{"error":…,"status":…}`: the members in sorted order, as every response body has
    /// always been written.
    static func json(status: String, error: String? = nil) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(64)
        output.append(UInt8(ascii: "{"))
        if let error {
            output.append(contentsOf: #""error":"#.utf8)
            JSONWriter.writeString(error, to: &output)
            output.append(UInt8(ascii: ","))
        }
        output.append(contentsOf: #""status":"#.utf8)
        JSONWriter.writeString(status, to: &output)
        output.append(UInt8(ascii: "}"))
        return String(decoding: output, as: UTF8.self)
    }

    /// Paths go to the log only when they are ours; anything else is just "other".
    static func loggablePath(_ path: String) -> String {
        path.count <= 64 && path.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") })
            ? path : "other"
    }
}
