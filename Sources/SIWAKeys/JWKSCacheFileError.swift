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
        /// Something other than a regular file is at the path (a FIFO, a directory, a device,
        /// a symbolic link): it is not read.
        public static let notRegularFile = Code("cache_not_regular_file")
        /// The file is larger than any JWKS we would have written.
        public static let tooLarge = Code("cache_too_large")
        /// The new file could not be written, synced or renamed into place.
        public static let writeFailed = Code("cache_write_failed")
    }
}
