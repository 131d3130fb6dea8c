import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWAStore
import SIWATelemetry

extension ServeCommand {
    /// With `SIWA_REDIS_SENTINELS`: asks the sentinels once before serving and confirms the
    /// address with `ROLE` on the data node (so the start-up check below runs against a
    /// confirmed primary, never a replica a stale sentinel named). Sentinels that do not
    /// answer, or name no node that is a master now, are no reason to refuse to start
    /// (notifications are spooled meanwhile, and /healthz says 503), nor is a sentinel's or a
    /// data node's certificate the endpoint refuses (an outage as at run time, returned for
    /// `--check` to report); sentinels that answer "no such master" or refuse the password
    /// are a setting to fix, so serve stops with a message naming it (exit status 2).
    static func locatePrimaryAtStart(
        _ configuration: ServerConfiguration, _ locator: RedisPrimaryLocator
    ) -> Result<ServerCertificateRefusal?, StartRefused> {
        let confirming = configuration.redis.connection(.sentinel(locator))
        defer { confirming.disconnect() }
        do {
            try confirming.connect()
        } catch
            where error.code != .sentinelUnknownMaster && error.code != .sentinelLoginRefused
            && !Self.isSentinelTLSFileRefusal(error)
        {
            // A refused certificate (a sentinel's or a data node's) is an outage, as at run time.
            if let refusal = ServerCertificateRefusal(error) { return .success(refusal) }
            // No address confirmed. One the sentinels named may still refuse the URL's user or
            // password (a setting to fix, not an outage): the start-up check tells which.
            if let named = locator.lastNamed {
                switch checkRedis(configuration, at: configuration.redis.endpoint.at(named)) {
                case .refused(let refusal): return .failure(refuse(setting: "SIWA_REDIS_URL", message: refusal))
                case .certificateRefused(let refusal): return .success(refusal)
                case .usable: break
                }
            }
            EventLog.event(
                "redis_primary_unknown", level: "warning",
                [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
        } catch {
            return .failure(refuse(setting: (error.field ?? .sentinels).setting, message: error.operatorMessage))
        }
        return .success(nil)
    }

    /// TLS to the sentinels cannot work as set on this side (a TLS file of ours that cannot
    /// be used: a setting to fix), as opposed to a sentinel's certificate being refused (an
    /// outage, as at run time) or a data node refusing TLS, which the start-up check names.
    static func isSentinelTLSFileRefusal(_ error: RedisError) -> Bool {
        error.code == .tlsRefused && error.field == .sentinelTLS && error.certificateRefusal == nil
    }

    /// One `+switch-master` watcher per sentinel, for the service group to run and stop.
    static func sentinelWatchers(_ locator: RedisLocator) -> [RedisSentinelWatcher] {
        guard case .sentinel(let locator) = locator else { return [] }
        return locator.sentinels.map { RedisSentinelWatcher(sentinel: $0, locator: locator) }
    }

    /// `redis_primary_unconfirmed`, which every discovery during an outage of the primary
    /// would log (twice a second): once when it starts or changes, then a summary every
    /// 30 s with how many times and since when, and a last one when a primary is found or a
    /// switch announced.
    static let unconfirmedPrimary = RepeatedEventLog(event: "redis_primary_unconfirmed")

    /// What the locator reports, as one JSON line each: which sentinel named which address
    /// and what its ROLE said, and every move of the primary.
    @Sendable static func logSentinelEvent(_ event: RedisPrimaryLocator.Event) {
        switch event {
        case .sentinelNamedNonPrimary(let sentinel, let primary, let role):
            EventLog.event(
                "redis_sentinel_stale", level: "warning",
                [
                    ("sentinel", .string(sentinel.description)), ("named", .string(primary.description)),
                    ("role", .string(role.description)),
                ])
        case .sentinelNamedDemoted(let sentinel, let primary):
            EventLog.event(
                "redis_sentinel_stale", level: "warning",
                [
                    ("sentinel", .string(sentinel.description)), ("named", .string(primary.description)),
                    ("role", .null), ("reason", .string("announced as the old primary by +switch-master")),
                ])
        case .sentinelBehind(let sentinel, let primary, let configEpoch, let highest):
            EventLog.event(
                "redis_sentinel_stale", level: "warning",
                [
                    ("sentinel", .string(sentinel.description)), ("named", .string(primary.description)),
                    ("role", .null), ("reason", .string("config-epoch \(configEpoch) behind \(highest)")),
                ])
        case .failoverSuspected(let sentinel, let primary, let event):
            EventLog.event(
                "redis_failover_suspected", level: "warning",
                [
                    ("sentinel", .string(sentinel.description)), ("primary", .string(primary.description)),
                    ("announced", .string(event)),
                ])
        case .sentinelNamedUnreachable(let sentinel, let primary, let message):
            // Asked again at every discovery through an outage: logged when the address or the
            // reason changes, then summarised every 30 s (see `unconfirmedPrimary`).
            unconfirmedPrimary.record(
                key: "\(primary) \(message)",
                [
                    ("sentinel", .string(sentinel.description)), ("named", .string(primary.description)),
                    ("message", .string(message)),
                ])
        case .primaryFound(let sentinel, let primary, let previous):
            unconfirmedPrimary.end()
            EventLog.event(
                "redis_primary_found",
                [
                    ("sentinel", .string(sentinel.description)), ("primary", .string(primary.description)),
                    ("previous", previous.map { .string($0.description) } ?? .null), ("role", .string("master")),
                ])
        case .switchAnnounced(let sentinel, let old, let new):
            unconfirmedPrimary.end()
            EventLog.event(
                "redis_primary_switched", level: "warning",
                [
                    ("sentinel", .string(sentinel.description)), ("old", .string(old.description)),
                    ("new", .string(new.description)),
                ])
        case .sentinelWatchFailed(let sentinel, let message):
            EventLog.event(
                "redis_sentinel_watch_failed", level: "warning",
                [("sentinel", .string(sentinel.description)), ("message", .string(message))])
        case .sentinelWatchRestored(let sentinel):
            EventLog.event("redis_sentinel_watch_restored", [("sentinel", .string(sentinel.description))])
        }
    }
}
