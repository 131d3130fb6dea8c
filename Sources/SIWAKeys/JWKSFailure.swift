/// Why the provider holds no new keys from a fetch or the cache file: a stable code, the
/// plain message the log shows, and the error underneath (the fetch's `HTTPSFetchError`,
/// the document's `VerificationError`, the cache file's `JWKSCacheFileError`), never
/// flattened to text.
public struct JWKSFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public let code: Code
    public let message: String
    public let cause: (any Error)?

    init(_ code: Code, _ message: String, cause: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    /// The message, then the cause's own description.
    public var description: String { cause.map { "\(message): \($0)" } ?? message }

    public static func == (lhs: JWKSFailure, rhs: JWKSFailure) -> Bool {
        lhs.code == rhs.code && lhs.description == rhs.description
    }

    /// A stable, machine-readable code. New codes break no caller.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The HTTPS GET of the JWKS URL failed (the cause is the fetch's error).
        public static let fetchFailed = Code("jwks_fetch_failed")
        /// A document was read but gives no usable key.
        public static let documentUnusable = Code("jwks_document_unusable")
        /// The cache file could not be read, or holds no usable key.
        public static let cacheLoadFailed = Code("jwks_cache_load_failed")
        /// The cache file could not be written (the keys held are good).
        public static let cacheWriteFailed = Code("jwks_cache_write_failed")
        /// A reload was asked for, but no cache file is configured.
        public static let noCacheFile = Code("jwks_no_cache_file")
        /// A reload was asked for, but the cache file does not exist.
        public static let cacheFileMissing = Code("jwks_cache_file_missing")
    }
}
