import SIWAFastCGI
import SIWAJSON
import SIWASettings
import SIWASpool
import SIWASupport
import SIWATelemetry
import SIWAVerification

/// The responder's status policy: the verifier says what kind of failure it found; which
/// HTTP status that is, and which replies ask Apple to retry later, is decided here, once.
extension NotificationResponder {
    /// The HTTP status of a refusal from verification.
    public static func httpStatus(for failure: VerificationError.FailureClass) -> Int {
        switch failure {
        // Not a well-formed notification: Apple should not retry.
        case .malformed: 400
        case .tooLarge: 413
        // Not proven to come from Apple.
        case .notAuthentic: 401
        // Authentic, for a client ID this deployment does not serve.
        case .notOurs: 403
        // Cannot decide now (no keys yet, or our entry for the kid is unusable): Apple retries.
        case .retryable: 503
        }
    }

    /// The HTTP status of a refusal from verification.
    public static func httpStatus(for error: VerificationError) -> Int { httpStatus(for: error.failureClass) }

    /// The settings' default `Retry-After` (`RequestSettings`, where the table reads it).
    public static let defaultRetryAfter = RequestSettings.defaultRetryAfter
    /// The `Retry-After` times the settings accept.
    public static let retryAfterRange = RequestSettings.retryAfterRange

    /// `Retry-After` goes on every 503, added in `handle`: Apple (and a load balancer) come
    /// back after it.
    var retryAfter: FastCGIResponse.Header {
        FastCGIResponse.Header("Retry-After", String(configuration.requests.retryAfter.wholeSeconds))
    }

    /// Neither Redis nor the spool can take the record: 503 `store_unavailable`, nothing
    /// answered 2xx, so Apple retries.
    static func storeUnavailable(_ result: Reply, _ spoolError: SpoolError) -> Reply {
        EventLog.event("spool_append_failed", level: "error", spoolError.logFields)
        return unavailable(result, errorCode: "store_unavailable")
    }

    /// A 503 for the store: the request's type and client stay on its log line.
    static func unavailable(_ result: Reply, errorCode: String) -> Reply {
        var unavailable = result
        unavailable.status = 503
        unavailable.outcome = "unavailable"
        unavailable.errorCode = errorCode
        unavailable.body = json(status: "unavailable", error: errorCode)
        return unavailable
    }
}
