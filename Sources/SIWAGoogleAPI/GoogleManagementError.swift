import SIWASupport

/// Why a call to Google's RISC management API did not do what it was asked. The message says
/// what Google answered (its own `error.message`, cut short, when it gave one) and what to
/// check; it never holds the authorisation token or the key.
public struct GoogleManagementError: CodedError {
    public let code: Code
    public let message: String
    /// The HTTP status Google answered, when it answered.
    public let httpStatus: Int?
    /// Seconds Google asked to wait (`Retry-After` of a `429` or `503`), when it said.
    public let retryAfterSeconds: Int64?

    init(_ code: Code, _ message: String, httpStatus: Int? = nil, retryAfterSeconds: Int64? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// Google answered and refused the request: retrying the same request cannot help.
    public var isRefusal: Bool {
        [.badRequest, .unauthorized, .forbidden, .notConfigured, .unexpectedAnswer].contains(code)
    }

    public struct Code: ErrorCode {
        public let rawValue: String

        init(_ rawValue: String) { self.rawValue = rawValue }

        /// 400: a field is missing or malformed (an event type Google does not know, a bad status).
        public static let badRequest = Code("google_bad_request")
        /// 401: the authorisation JWT was refused (a deleted or disabled key, the clock far off).
        public static let unauthorized = Code("google_unauthorized")
        /// 403: the receiver URL is not HTTPS or not in a domain of the project, the service
        /// account lacks the RISC Configuration Admin role, the RISC API is not enabled, or the
        /// stream status is not one Google accepts.
        public static let forbidden = Code("google_forbidden")
        /// 404: the project has no stream configuration yet (`google register` first).
        public static let notConfigured = Code("google_not_configured")
        /// 429 beyond what the command waits for, after its retries.
        public static let throttled = Code("google_throttled")
        /// 5xx after the retries.
        public static let unavailable = Code("google_unavailable")
        /// No answer: DNS, TCP, TLS or a timeout, after the retries.
        public static let unreachable = Code("google_unreachable")
        /// Any other status, or a 200 whose body is not the JSON the API documents.
        public static let unexpectedAnswer = Code("google_unexpected_answer")
        /// The authorisation JWT could not be signed with the key.
        public static let signingFailed = Code("google_signing_failed")
    }
}
