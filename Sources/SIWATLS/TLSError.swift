import SIWASupport

/// Why a TLS client context could not be made or a TLS stream failed: a stable code and
/// a plain message (OpenSSL's reason, a file path; never application bytes).
public struct TLSError: CodedError {
    public let code: Code
    public let message: String
    /// OpenSSL's certificate verification result (`X509_V_ERR_...`) when the peer's
    /// certificate was refused, beside the message's text.
    public let verificationResult: Int?

    init(_ code: Code, _ message: String, verificationResult: Int? = nil) {
        self.code = code
        self.message = message
        self.verificationResult = verificationResult
    }

    /// A stable, machine-readable code. New codes break no caller.
    public struct Code: ErrorCode {
        public let rawValue: String

        init(_ rawValue: String) { self.rawValue = rawValue }

        /// The CA file cannot be read or holds no certificate.
        public static let caFileUnusable = Code("tls_ca_file_unusable")
        /// The client certificate file cannot be read or is not a PEM certificate chain.
        public static let certificateFileUnusable = Code("tls_certificate_file_unusable")
        /// The client key cannot be read, or does not match the client certificate.
        public static let keyFileUnusable = Code("tls_key_file_unusable")
        /// OpenSSL could not make a context or a connection object.
        public static let setupFailed = Code("tls_setup_failed")
        /// The peer's certificate was refused: untrusted, expired, or not naming the host.
        public static let peerCertificateRefused = Code("tls_peer_certificate_refused")
        /// The handshake failed for another reason (protocol version, the peer's alert).
        public static let handshakeFailed = Code("tls_handshake_failed")
        /// The peer did not answer within the socket's timeout.
        public static let timedOut = Code("tls_timed_out")
        /// The peer closed the connection.
        public static let closed = Code("tls_closed")
        /// Reading or writing failed (a reset, a TLS alert after the handshake).
        public static let ioFailed = Code("tls_io_failed")
    }
}
