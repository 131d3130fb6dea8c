import SIWARedis

// The Prometheus lines of the Sentinel and Cluster locators' counters: the metric names are
// the application's, the wrapper over hiredis only counts.

extension RedisLocator {
    /// The Prometheus lines of the topology's counters (none with one Redis).
    package func metricsText() -> String {
        switch self {
        case .single: ""
        case .sentinel(let locator): locator.metricsText()
        case .cluster(let locator): locator.metricsText()
        }
    }
}

extension RedisPrimaryLocator {
    /// The Prometheus lines for the sentinel counters.
    func metricsText() -> String {
        """
        # HELP siwa_redis_sentinel_discoveries_total Times the sentinels were asked for the primary.
        # TYPE siwa_redis_sentinel_discoveries_total counter
        siwa_redis_sentinel_discoveries_total \(discoveries)
        # HELP siwa_redis_failovers_total Times the primary in use moved to another address (a discovery or +switch-master).
        # TYPE siwa_redis_failovers_total counter
        siwa_redis_failovers_total \(failovers)
        # HELP siwa_redis_sentinel_stale_answers_total Sentinel answers naming an address whose ROLE was not master.
        # TYPE siwa_redis_sentinel_stale_answers_total counter
        siwa_redis_sentinel_stale_answers_total \(staleAnswers)

        """
    }
}

extension RedisClusterLocator {
    /// The Prometheus lines for the cluster counters.
    func metricsText() -> String {
        """
        # HELP siwa_redis_cluster_discoveries_total Times the cluster was asked for its slots.
        # TYPE siwa_redis_cluster_discoveries_total counter
        siwa_redis_cluster_discoveries_total \(discoveries)
        # HELP siwa_redis_cluster_primary_changes_total Times the slot's primary changed (failover or migration).
        # TYPE siwa_redis_cluster_primary_changes_total counter
        siwa_redis_cluster_primary_changes_total \(failovers)
        # HELP siwa_redis_cluster_moved_total MOVED answers followed (the slot's owner changed).
        # TYPE siwa_redis_cluster_moved_total counter
        siwa_redis_cluster_moved_total \(moves)
        # HELP siwa_redis_cluster_ask_total ASK answers followed: the migration target answered the command.
        # TYPE siwa_redis_cluster_ask_total counter
        siwa_redis_cluster_ask_total \(asks)

        """
    }
}
