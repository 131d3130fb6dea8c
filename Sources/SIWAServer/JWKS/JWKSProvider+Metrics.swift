extension JWKSProvider {
    /// Counters for the metrics endpoint and the health check.
    public struct Metrics: Sendable, Equatable {
        /// Seconds since the current keys were fetched (from the cache file's time when
        /// loaded from it); nil while no key set has ever been loaded.
        public let ageSeconds: Int64?
        /// Fetches that failed or brought an unusable document, since start.
        public let refreshFailures: Int
        /// How many keys in the current set can verify.
        public let usableKeyCount: Int
        /// The plain message of the most recent failure, for the application to log.
        public let lastFailure: String?
    }
}
