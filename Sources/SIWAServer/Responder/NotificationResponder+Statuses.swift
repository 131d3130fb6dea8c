import SIWAFastCGI
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
}
