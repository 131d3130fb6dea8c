import Foundation
import SIWAFastCGI
import SIWAHTTPS
import SIWAKeys
import SIWARedis
import SIWAResponder
import SIWASettingKeys
import SIWASettings
import SIWASpool
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWAVerification

/// The composition root of `serve`: every part is built here, once, and handed what it
/// needs; nothing here starts a thread or touches the network. `start(in:)` then starts the
/// services in this order (for `ServeCommand.serve`, and for the tests that build serve in
/// process); the group stops them in reverse.
///
/// What starts before what, and why:
/// 1. the JWKS refresher (its start loads the cache file and fetches once: keys before requests),
/// 2. with Sentinel, a watcher per sentinel (a failover announced before the first request is seen),
/// 3. the circuit breaker (its probe and /healthz's PING have their thread before a request),
/// 4. the FastCGI server (its start listens: requests arrive from here on),
/// 5. the spool replayer (its first pass after the socket listens: a long spool must not
///    keep nginx answering 502 after a restart),
/// 6. the deletion-duty reader (the /metrics figures of the deletions stream),
/// 7. the client-activity loader (reads `P:clients` once Redis answers: the silence figures).
/// A stop (SIGTERM, SIGINT, or a service returning on its own) stops them one by one, last
/// started first, each asked once the one after it has returned, within one shutdown
/// deadline (`ServiceGroup`): the FastCGI server drains while everything before it runs.
struct ServeAssembly {
    let keys: JWKSProvider
    let jwksRefresher: JWKSRefresher
    /// Google's keys and issuer, kept fresh like Apple's (nil: Google not served).
    let googleKeysRefresher: JWKSRefresher?
    let sentinelWatchers: [RedisSentinelWatcher]
    let breaker: RedisCircuitBreaker
    let server: FastCGIServer
    let replayer: SpoolReplayer
    let deletionDuty: DeletionDutyMonitor
    let clientActivity: ClientActivityLoader
    let responder: NotificationResponder
    let spool: NotificationSpool

    /// Builds the graph from the checked settings and the Redis found at start. A refusal
    /// (the spool cannot be opened, the FastCGI settings cannot be served) names the setting.
    static func build(
        _ configuration: ServerConfiguration, redisAtStart: ServeCommand.RedisAtStart
    ) throws(ConfigurationError) -> ServeAssembly {
        let metrics = ServerMetrics()
        // The one clock every part reads (monotonic for intervals, wall time where one is
        // written or shown). The shutdown deadlines are waits, on the machine's clock.
        let clock = EndpointClock.system
        // An unknown kid's fetches: handed over by the provider, made by the refresher.
        let fetchQueue = JWKSFetchQueue()
        let keys = JWKSProvider(
            settings: configuration.jwks.provider, fetcher: configuration.jwks.fetcher, fetchQueue: fetchQueue,
            clock: clock)

        let redis = configuration.redis
        let store = configuration.store
        let locator = redisAtStart.locator
        let makeConnection: @Sendable () -> RedisConnection = { redis.connection(locator) }
        let makeStore: @Sendable () -> NotificationStore = {
            NotificationStore(
                connection: makeConnection(), keyPrefix: store.keyPrefix, seenMarkerTTL: store.seenMarkerTTL,
                streamMaximumLength: store.streamMaximumLength, minimumReplicas: redis.minimumReplicas,
                replicaTimeout: redis.replicaTimeout)
        }
        let (spool, setAside) = try openSpool(configuration, clock: clock)
        let replayer = SpoolReplayer(
            spool: spool, rejected: setAside, store: makeStore(), metrics: metrics, clientIDs: configuration.clientIDs,
            googleClientIDs: Set(configuration.google.clientIDs), retentionDays: configuration.spool.retentionDays,
            clock: clock)
        let stores = NotificationStorePool(makeStore: makeStore)
        let breaker = RedisCircuitBreaker(
            retryInterval: redis.circuitRetryInterval, clock: clock,
            ping: { (try? stores.withStore { store throws(RedisError) in store.probe() }) ?? nil },
            // Redis is back: the replayer drains the spool now, not at its next poll.
            onClose: { replayer.nudge() })
        // The deletion figures of /metrics come from this service's last reading, on a
        // connection of its own: a scrape never waits on Redis.
        let deletionDuty = DeletionDutyMonitor(
            connection: makeConnection(), key: RedisKeyLayout(prefix: store.keyPrefix).deletions, clock: clock,
            transfers: (RedisKeyLayout(prefix: store.keyPrefix), Array(configuration.clientIDs)))
        // Google's keys: the same provider and refresher as Apple's, over the discovery document.
        let google = configuration.google.isServed ? googleReceiver(configuration, clock: clock) : nil
        let responder = NotificationResponder(
            configuration: configuration,
            verifier: NotificationVerifier(
                clientIDs: configuration.clientIDs, leewaySeconds: configuration.requests.leeway.wholeSeconds,
                // The FastCGI server enforces SIWA_MAX_BODY_BYTES (a larger body arrives here as
                // `.tooLarge`, unread): the verifier does not check it a second time.
                maximumBodyBytes: .max),
            keys: keys, breaker: breaker, stores: stores, spool: spool, drain: replayer, metrics: metrics,
            clock: clock, redisLocator: locator, deletionDuty: deletionDuty, google: google)
        let serverConfiguration = try fastCGIServerConfiguration(configuration)
        let refusalLogs = Dictionary(
            uniqueKeysWithValues: FastCGIRefusal.allCases.map {
                ($0, RepeatedEventLog(event: "fastcgi_request_refused"))
            })
        let server: FastCGIServer
        do throws(FastCGIError) {
            server = try FastCGIServer(
                configuration: serverConfiguration,
                // A local peer sent what nginx never sends (more than the largest allowed
                // request, parameters nginx never sends): closed unanswered. Counted each
                // time; logged at once the first time for each reason, then summarised (a
                // peer at rate must not turn the log into its own flood).
                onRefusal: { refusal in
                    metrics.recordFastCGIRefusal(refusal)
                    refusalLogs[refusal]?.record(key: refusal.rawValue, [("reason", .string(refusal.rawValue))])
                },
                handler: { responder.handle($0) })
        } catch {
            throw servedRefusal(error)
        }
        return ServeAssembly(
            keys: keys, jwksRefresher: JWKSRefresher(provider: keys, fetchQueue: fetchQueue, loadsKeysAtStart: true),
            googleKeysRefresher: google.map {
                JWKSRefresher(
                    provider: $0.keys, fetchQueue: $0.keys.fetchQueue, loadsKeysAtStart: true,
                    name: "google-keys-refresher", identityProvider: "google")
            },
            // With Sentinel: every connection leaves an old primary as soon as a sentinel
            // announces a failover.
            sentinelWatchers: ServeCommand.sentinelWatchers(locator), breaker: breaker, server: server,
            replayer: replayer, deletionDuty: deletionDuty,
            clientActivity: ClientActivityLoader(record: responder.clientActivity), responder: responder, spool: spool)
    }

    /// Starts the services in the order above. A FastCGI server that cannot listen is thrown
    /// before the services after it start; the caller stops what did start.
    func start(in services: ServiceGroup) throws(FastCGIError) {
        services.start(jwksRefresher)
        if let googleKeysRefresher { services.start(googleKeysRefresher) }
        for watcher in sentinelWatchers { services.start(watcher) }
        services.start(breaker)
        try services.start(server)
        services.start(replayer)
        services.start(deletionDuty)
        services.start(clientActivity)
    }

    /// Google's receiver: its verifier (the same leeway as Apple's) and its keys, fetched
    /// through the `risc-configuration` document with the JWKS fetch's CA file and timeout.
    static func googleReceiver(_ configuration: ServerConfiguration, clock: EndpointClock) -> SecurityEventReceiver {
        let keys = JWKSProvider(
            settings: configuration.google.keys, fetcher: RISCDiscoveryFetcher(fetcher: configuration.jwks.fetcher),
            fetchQueue: JWKSFetchQueue(), clock: clock)
        return SecurityEventReceiver(
            settings: configuration.google,
            verifier: SecurityEventVerifier(
                clientIDs: configuration.google.clientIDs, leewaySeconds: configuration.requests.leeway.wholeSeconds,
                maximumTokenBytes: .max),
            keys: keys, startedAt: clock.wallMilliseconds())
    }

    /// The FastCGI server's configuration from the settings, validated as the server's
    /// init validates it (`serve --check` asks this too): the refusal names the setting.
    static func fastCGIServerConfiguration(
        _ configuration: ServerConfiguration
    ) throws(ConfigurationError) -> FastCGIServerConfiguration {
        let server = configuration.fastCGI.server
        do throws(FastCGIError) {
            try server.validate()
        } catch {
            throw servedRefusal(error)
        }
        return server
    }

    static func servedRefusal(_ error: FastCGIError) -> ConfigurationError {
        ConfigurationError(SettingKey.fastCGISocket, "cannot be served: \(error)")
    }

    /// The spool and its set-aside store, opened as serve opens them (creating what is
    /// missing), with a line for each leftover settled and for what waits to be replayed.
    static func openSpool(
        _ configuration: ServerConfiguration, clock: EndpointClock
    ) throws(ConfigurationError) -> (NotificationSpool, SpoolSetAsideStore) {
        let spool: NotificationSpool
        let setAside: SpoolSetAsideStore
        do throws(SpoolError) {
            spool = try NotificationSpool(directory: configuration.spool.directory, clock: clock)
            setAside = try SpoolSetAsideStore(spoolDirectory: configuration.spool.directory, clock: clock)
        } catch {
            throw ServeCommand.spoolRefusal(error)
        }
        for leftover in setAside.leftovers {
            EventLog.event(
                "spool_leftover_settled", level: "warning",
                [("file", .string(leftover.file)), ("action", .string(leftover.action.rawValue))])
        }
        if spool.depth > 0 {
            // Replayed by the replayer's first pass, once the socket listens.
            EventLog.event("spool_pending_at_start", level: "warning", [("depth", .integer(Int64(spool.depth)))])
        }
        return (spool, setAside)
    }
}
