import SIWAHTTPS

extension JWKSProvider {
    /// Where Apple's keys come from and how often they are fetched again.
    public struct Settings: Sendable, Equatable {
        /// Apple's published JWKS.
        public static let appleKeysURL = "https://appleid.apple.com/auth/keys"
        /// An hour: Apple rotates rarely, and an unknown kid fetches sooner anyway.
        public static let defaultRefreshInterval: Duration = .seconds(3600)
        /// The scheduled refresh the settings accept: a minute to a day.
        public static let refreshIntervalRange: ClosedRange<Duration> = .seconds(60) ... .seconds(86_400)
        public static let defaultFailedRefreshRetryInterval: Duration = .seconds(60)
        /// At most one unknown-kid fetch a minute.
        public static let defaultUnknownKeyIDRefreshInterval: Duration = .seconds(60)
        /// The unknown-kid interval the settings accept: a second to an hour.
        public static let unknownKeyIDRefreshIntervalRange: ClosedRange<Duration> = .seconds(1) ... .seconds(3600)
        public static let defaultUnknownKeyIDWaitLimit: Duration = .seconds(2)
        /// The whole fetch's timeout (connect, TLS, request and body): the fetcher's own default.
        public static let defaultFetchTimeout: Duration = .seconds(Int(HTTPSFetcher.defaultTimeoutSeconds))
        /// The fetch timeouts the settings accept: a second to a minute.
        public static let fetchTimeoutRange: ClosedRange<Duration> = .seconds(1) ... .seconds(60)

        /// The JWKS document's URL: https, or plain http to a loopback host.
        public var url: String
        /// Where the last good JWKS is kept across restarts; nil keeps none.
        public var cacheFilePath: String?
        /// How long a good key set is used before the scheduled refresh.
        public var refreshInterval: Duration
        /// How soon a scheduled refresh is tried again after a failure.
        public var failedRefreshRetryInterval: Duration
        /// The least time between two fetches caused by an unknown `kid`: a stranger
        /// sending made-up kids must not turn us into a load generator against Apple.
        public var unknownKeyIDRefreshInterval: Duration
        /// The longest a request with an unknown kid waits for the fetch it caused or joined;
        /// then it is answered 503 `keys_unavailable` (Apple retries) while the fetch goes on.
        public var unknownKeyIDWaitLimit: Duration
        /// How many requests with an unknown kid may wait for a fetch at once; the others are
        /// answered 503 at once. Kept below the worker count, so that made-up kids never hold
        /// every worker: known kids and `/healthz` always find one.
        public var unknownKeyIDWaiters: Int

        public init(
            url: String = appleKeysURL, cacheFilePath: String? = nil,
            refreshInterval: Duration = defaultRefreshInterval,
            failedRefreshRetryInterval: Duration = defaultFailedRefreshRetryInterval,
            unknownKeyIDRefreshInterval: Duration = defaultUnknownKeyIDRefreshInterval,
            unknownKeyIDWaitLimit: Duration = defaultUnknownKeyIDWaitLimit, unknownKeyIDWaiters: Int = 1
        ) {
            self.url = url
            self.cacheFilePath = cacheFilePath
            self.refreshInterval = refreshInterval
            self.failedRefreshRetryInterval = failedRefreshRetryInterval
            self.unknownKeyIDRefreshInterval = unknownKeyIDRefreshInterval
            self.unknownKeyIDWaitLimit = unknownKeyIDWaitLimit
            self.unknownKeyIDWaiters = unknownKeyIDWaiters
        }
    }
}
