import SIWASupport

/// Why the JWKS cache file could not be read or written: a stable code and a plain message.
public struct JWKSCacheFileError: CodedError {
    public let code: Code
    public let message: String

    init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// A stable, machine-readable code. New codes break no caller.
    public struct Code: ErrorCode {
        public let rawValue: String

        init(_ rawValue: String) { self.rawValue = rawValue }

        /// The file exists but cannot be read.
        public static let readFailed = Code("cache_read_failed")
        /// The file is larger than any JWKS we would have written.
        public static let tooLarge = Code("cache_too_large")
        /// The new file could not be written, synced or renamed into place.
        public static let writeFailed = Code("cache_write_failed")
    }
}
