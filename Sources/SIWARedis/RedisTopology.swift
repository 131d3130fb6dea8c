/// How the Redis that holds the data is found: the one choice the settings make, read once
/// into one value. Nothing here opens a socket: `locator(...)` builds what the process
/// shares, and each `RedisConnection` asks it. A fourth topology would be one more case here,
/// in `RedisLocator`, and one `RedisRouting`.
public enum RedisTopology: Sendable, Equatable {
    /// One Redis at the URL's address.
    case single
    /// Redis Sentinel: the primary is the one the sentinels name (confirmed by `ROLE`); the
    /// URL gives only the database, user, password and TLS.
    case sentinel(Sentinel)
    /// Redis Cluster: the primary of the one hash slot every key of the contract is in, found
    /// from these seed nodes; the URL gives only the user, password and TLS (database 0).
    case cluster(seeds: [RedisNodeAddress])

    /// What Sentinel needs: where the sentinels are, the master they monitor, their password
    /// and TLS to them.
    public struct Sentinel: Sendable, Equatable {
        public var sentinels: [RedisNodeAddress]
        public var masterName: String
        public var password: String?
        /// TLS to the sentinels; nil: plain TCP.
        public var tls: RedisTLS?

        public init(sentinels: [RedisNodeAddress], masterName: String, password: String?, tls: RedisTLS? = nil) {
            self.sentinels = sentinels
            self.masterName = masterName
            self.password = password
            self.tls = tls
        }
    }

    /// What the locators report, for the application to log (each optional).
    public struct Observers: Sendable {
        public var sentinel: (@Sendable (RedisPrimaryLocator.Event) -> Void)?
        public var cluster: (@Sendable (RedisClusterLocator.Event) -> Void)?

        public init(
            sentinel: (@Sendable (RedisPrimaryLocator.Event) -> Void)? = nil,
            cluster: (@Sendable (RedisClusterLocator.Event) -> Void)? = nil
        ) {
            self.sentinel = sentinel
            self.cluster = cluster
        }
    }

    /// The locator every connection of this process shares (nothing is asked yet).
    /// `endpoint` gives the login and TLS, `timeout` bounds each sentinel's or node's answer,
    /// and `hashTagKey` is any key of the contract (in a cluster, its slot is every key's).
    public func locator(
        endpoint: RedisEndpoint, timeout: Duration, hashTagKey: String, observers: Observers = Observers()
    ) -> RedisLocator {
        switch self {
        case .single:
            return .single
        case .sentinel(let sentinel):
            return .sentinel(
                RedisPrimaryLocator(
                    sentinels: sentinel.sentinels, masterName: sentinel.masterName, sentinelPassword: sentinel.password,
                    timeout: timeout, sentinelTLS: sentinel.tls, observer: observers.sentinel))
        case .cluster(let seeds):
            return .cluster(
                RedisClusterLocator(
                    seeds: seeds, hashTagKey: hashTagKey, endpoint: endpoint, timeout: timeout,
                    observer: observers.cluster ?? { _ in }))
        }
    }
}

/// A topology located: what every connection of a process asks where its node is (shared,
/// thread safe). Built once, by `RedisTopology.locator`, and handed as one value to the
/// connections, the responder (`/healthz`, `/metrics`) and the operator commands.
public enum RedisLocator: Sendable {
    /// One Redis at the URL's address: nothing to locate.
    case single
    /// The primary, through the sentinels.
    case sentinel(RedisPrimaryLocator)
    /// The slot's primary, through the cluster.
    case cluster(RedisClusterLocator)

    /// The node in use (the primary the sentinels named, the slot's primary); nil with one
    /// Redis, or while none is known.
    public var current: RedisNodeAddress? {
        switch self {
        case .single: nil
        case .sentinel(let locator): locator.current
        case .cluster(let locator): locator.current
        }
    }

    /// Where a connection to the data node goes, logging in as `endpoint` says: `endpoint`
    /// itself with one Redis, else the node in use (nil while none is known).
    public func dataEndpoint(_ endpoint: RedisEndpoint) -> RedisEndpoint? {
        switch self {
        case .single: endpoint
        case .sentinel(let locator): locator.current.map { endpoint.at($0) }
        // A cluster has only database 0.
        case .cluster(let locator): locator.current.map { endpoint.at($0, database: 0) }
        }
    }

    /// What one connection keeps about where it is: the one switch on the topology a
    /// connection makes.
    func routing() -> any RedisRouting {
        switch self {
        case .single: SingleNodeRouting()
        case .sentinel(let locator): SentinelRouting(locator)
        case .cluster(let locator): ClusterRouting(locator)
        }
    }
}
