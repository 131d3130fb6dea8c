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
        /// Entries of the last document taken (fetched or read from the cache file) that
        /// cannot verify, counting those under which an older key was kept.
        public let unusableKeyCount: Int
        /// The plain message of the most recent failure, for the application to log.
        public let lastFailure: JWKSFailure?
    }

    /// The provider's own lines of the metrics text (what `ServerMetrics` does not hold).
    public func metricsText() -> String {
        let unusable = metrics(now: now()).unusableKeyCount
        return """
            # HELP siwa_jwks_unusable_keys Entries of the last JWKS taken that cannot verify (an older key under the same kid is kept).
            # TYPE siwa_jwks_unusable_keys gauge
            siwa_jwks_unusable_keys \(unusable)

            """
    }
}
