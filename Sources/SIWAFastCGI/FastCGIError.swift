import Glibc
import SIWASupport

/// Why the FastCGI server could not start or serve: a stable code and a plain message
/// that names the setting or the system call, never a request's content.
public struct FastCGIError: CodedError {
    public let code: Code
    public let message: String
    /// The errno a failed system call set, kept as a number (not only as the message's
    /// text), so a caller can tell EADDRINUSE from EACCES without parsing.
    public let systemErrno: Int32?

    init(_ code: Code, _ message: String, systemErrno: Int32? = nil) {
        self.code = code
        self.message = message
        self.systemErrno = systemErrno
    }

    /// A stable, machine-readable code. A struct, so that a new code breaks no caller.
    public struct Code: ErrorCode {
        public let rawValue: String

        init(_ rawValue: String) { self.rawValue = rawValue }

        /// The listen address is not a unix socket path or a loopback `host:port`.
        public static let invalidListenAddress = Code("fastcgi_invalid_listen_address")
        /// The listen address names a host that is not loopback: refused on purpose.
        public static let nonLoopbackHost = Code("fastcgi_non_loopback_host")
        /// A setting (worker count, body limit, socket mode, group) is out of range.
        public static let invalidSetting = Code("fastcgi_invalid_setting")
        /// The socket group named in the settings does not exist.
        public static let unknownGroup = Code("fastcgi_unknown_group")
        /// socket(2), bind(2), listen(2), chmod(2) or chown(2) failed.
        public static let listenFailed = Code("fastcgi_listen_failed")
        /// libfcgi's FCGX_Init or FCGX_InitRequest failed.
        public static let libraryFailed = Code("fastcgi_library_failed")
        /// `start()` was called on a server that already ran.
        public static let alreadyStarted = Code("fastcgi_already_started")
    }
}

extension FastCGIError {
    /// A message with the failing call and the errno text, e.g. "bind: Address already in use".
    static func system(_ code: Code, _ call: String, errno value: Int32) -> FastCGIError {
        FastCGIError(code, "\(call): \(String(cString: strerror(value)))", systemErrno: value)
    }
}
