import SIWASupport

/// Why the service account's key file (`SIWA_GOOGLE_SERVICE_ACCOUNT_FILE`) was refused. The
/// message names the path and what to change; it never holds a byte of the file.
public struct GoogleServiceAccountKeyError: CodedError {
    public let code: Code
    public let message: String

    init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public struct Code: ErrorCode {
        public let rawValue: String

        init(_ rawValue: String) { self.rawValue = rawValue }

        /// The file cannot be opened (missing, no permission to read it).
        public static let unreadable = Code("key_file_unreadable")
        /// Not a regular file (a directory, a FIFO, a device).
        public static let notRegularFile = Code("key_file_not_regular")
        /// Owned by another user than the one running the command.
        public static let wrongOwner = Code("key_file_owner")
        /// Readable or writable by its group or by others (mode not 0600 or 0400).
        public static let tooOpen = Code("key_file_permissions")
        /// Not Google's JSON key format (`client_email`, `private_key`, `private_key_id`).
        public static let malformed = Code("key_file_malformed")
        /// `private_key` is not an RSA private key in PEM.
        public static let unusableKey = Code("key_file_unusable_key")
    }
}
