import SIWASupport

/// Why a fetch over HTTPS failed: a stable code and a plain message.
///
/// The message names the URL's host at most; it never holds a response body.
public struct HTTPSFetchError: CodedError {
    public let code: Code
    public let message: String
    /// The HTTP status when the server answered with something other than 200.
    public let httpStatus: Int?
    /// libcurl's own result code (a `CURLcode`) when the transfer failed inside libcurl:
    /// the cause as libcurl gave it, beside the message's text.
    public let curlCode: UInt32?

    init(_ code: Code, _ message: String, httpStatus: Int? = nil, curlCode: UInt32? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.curlCode = curlCode
    }

    public static func == (lhs: HTTPSFetchError, rhs: HTTPSFetchError) -> Bool {
        lhs.code == rhs.code && lhs.httpStatus == rhs.httpStatus
    }

    /// A stable, machine-readable code. New codes break no caller.
    public struct Code: ErrorCode {
        public let rawValue: String

        init(_ rawValue: String) { self.rawValue = rawValue }

        /// libcurl could not be initialised or a handle could not be made.
        public static let clientUnavailable = Code("client_unavailable")
        /// The URL does not parse.
        public static let urlInvalid = Code("url_invalid")
        /// Not https, and not plain http to a loopback host. No traffic was sent.
        public static let schemeNotAllowed = Code("scheme_not_allowed")
        /// The host name did not resolve.
        public static let resolveFailed = Code("resolve_failed")
        /// No TCP connection could be made.
        public static let connectFailed = Code("connect_failed")
        /// The whole transfer took longer than the timeout.
        public static let timedOut = Code("timed_out")
        /// The TLS handshake failed before any certificate decision.
        public static let tlsHandshakeFailed = Code("tls_handshake_failed")
        /// The server's certificate is untrusted or does not name the host.
        public static let tlsVerificationFailed = Code("tls_verification_failed")
        /// The configured CA file cannot be read or holds no certificate.
        public static let caFileUnusable = Code("ca_file_unusable")
        /// The response body is over the size cap.
        public static let responseTooLarge = Code("response_too_large")
        /// The server answered with a status other than 200 (redirects included).
        public static let httpStatusNotOK = Code("http_status_not_ok")
        /// The host resolved to a loopback, private, link-local, CGNAT, multicast or
        /// unspecified address and the destination does not allow one. Nothing was sent.
        public static let addressRefused = Code("address_refused")
        /// Any other transfer failure.
        public static let transferFailed = Code("transfer_failed")
    }
}
