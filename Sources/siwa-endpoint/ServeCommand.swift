import Foundation
import SIWAServer
import SIWAVerification

#if canImport(Glibc)
    import Glibc
#endif

/// `serve`: the FastCGI responder. Settings come from `SIWA_*` environment variables
/// and, optionally, an env file; a bad value stops it with a message naming the setting.
enum ServeCommand {
    static let help = """
        usage: siwa-endpoint serve [--env-file FILE] [--check]

        Runs the FastCGI responder behind nginx. Settings are SIWA_* environment
        variables (the environment wins over --env-file). --check validates the
        settings and exits. SIGTERM or SIGINT: stop accepting, finish requests in
        flight, exit 0.

        settings:
        \(ServerConfiguration.settings.map { "  \($0.name) (default: \($0.defaultValue ?? "required")): \($0.meaning)" }.joined(separator: "\n"))
        """

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(words, valueOptions: ["--env-file"], flagOptions: ["--check"])
        guard arguments.positionals.isEmpty else { throw UsageError("serve takes no positional arguments") }

        let configuration: ServerConfiguration
        do {
            configuration = try ServerConfiguration(
                environment: ProcessInfo.processInfo.environment, envFile: arguments.value("--env-file"))
        } catch {
            EventLog.event(
                "configuration_invalid", level: "error",
                [("setting", .string(error.setting)), ("message", .string(error.description))])
            Output.error("siwa-endpoint serve: \(error.description)")
            return 2
        }
        for name in configuration.unknownSettings {
            EventLog.event("unknown_setting", level: "warning", [("setting", .string(name))])
        }
        if arguments.has("--check") {
            Output.line("settings are valid")
            return 0
        }
        return try serve(configuration)
    }

    static func serve(_ configuration: ServerConfiguration) throws -> Int32 {
        // A peer that hangs up must not kill the process; SIGTERM/SIGINT may arrive
        // blocked from a parent, and the FastCGI server turns them into a clean stop.
        signal(SIGPIPE, SIG_IGN)
        var unblock = sigset_t()
        sigemptyset(&unblock)
        sigaddset(&unblock, SIGTERM)
        sigaddset(&unblock, SIGINT)
        pthread_sigmask(SIG_UNBLOCK, &unblock, nil)

        let metrics = ServerMetrics()
        let clockMilliseconds: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }

        let keys = JWKSProvider(
            settings: JWKSProvider.Settings(
                url: configuration.jwksURL, cacheFilePath: configuration.jwksCachePath,
                refreshIntervalSeconds: Int64(configuration.jwksRefreshSeconds),
                unknownKeyIDRefreshIntervalSeconds: Int64(configuration.jwksUnknownKeyIDRefreshSeconds)),
            fetcher: HTTPSFetcher(
                caFilePath: configuration.jwksCAFile, timeoutSeconds: Double(configuration.jwksTimeoutSeconds)))
        let startOutcome = keys.start()
        let jwks = keys.metrics(now: keys.now())
        EventLog.event(
            "jwks_loaded", level: jwks.usableKeyCount > 0 ? "info" : "error",
            [
                ("fetch", .string("\(startOutcome)")), ("keys", .integer(Int64(jwks.usableKeyCount))),
                ("last_failure", jwks.lastFailure.map { .string($0) } ?? .null),
            ])
        let refresher = JWKSRefresher(provider: keys)
        refresher.start()

        let redis = try RedisEndpoint(parsing: configuration.redisURL)
        let timeout = Duration.milliseconds(configuration.redisTimeoutMilliseconds)
        let locator: RedisPrimaryLocator?
        switch try locatePrimaryAtStart(configuration, timeout: timeout) {
        case .success(let found): locator = found
        case .failure(let refused): return refused.exitStatus
        }
        let makeStore: @Sendable () -> NotificationStore = {
            NotificationStore(
                connection: RedisConnection(
                    endpoint: redis, connectTimeout: timeout, commandTimeout: timeout, locator: locator),
                keyPrefix: configuration.keyPrefix, seenMarkerTTL: .seconds(configuration.seenTTLSeconds),
                streamMaxLength: configuration.streamMaximumLength)
        }
        let spool = try NotificationSpool(directory: configuration.spoolDirectory)
        let rejected = try NotificationSpool(directory: configuration.spoolDirectory + "/rejected")
        let replayer = SpoolReplayer(
            spool: spool, rejected: rejected, store: makeStore(), metrics: metrics,
            clockMilliseconds: clockMilliseconds,
            minimumReplicas: configuration.redisMinimumReplicas,
            replicaTimeout: .milliseconds(configuration.redisReplicaTimeoutMilliseconds))
        if spool.depth > 0 {
            EventLog.event("spool_pending_at_start", level: "warning", [("depth", .integer(Int64(spool.depth)))])
            replayer.replayOnce()
        }
        replayer.start()

        let responder = NotificationResponder(
            configuration: configuration, keys: keys, stores: NotificationStorePool(makeStore: makeStore), spool: spool,
            replayer: replayer, metrics: metrics, clockMilliseconds: clockMilliseconds, primaryLocator: locator)
        let address = try FastCGIListenAddress.parse(
            configuration.fastCGISocket, mode: UInt32(configuration.fastCGISocketMode),
            group: configuration.fastCGISocketGroup)
        let server = try FastCGIServer(
            configuration: FastCGIServerConfiguration(
                address: address, workerCount: configuration.workers, maxBodyBytes: configuration.maximumBodyBytes,
                shutdownTimeout: .seconds(configuration.shutdownTimeoutSeconds)),
            handler: { responder.handle($0) })
        EventLog.event(
            "started",
            [
                ("socket", .string(configuration.fastCGISocket)), ("workers", .integer(Int64(configuration.workers))),
                ("client_ids", .array(configuration.clientIDs.sorted().map { .string($0) })),
                ("notification_path", .string(configuration.notificationPath)), ("pid", .integer(Int64(getpid()))),
            ])
        let drained = try server.run(handlingSignals: true)
        replayer.stop()
        _ = refresher.stop()
        EventLog.event("stopped", level: drained ? "info" : "warning", [("drained", .bool(drained))])
        return 0
    }
}
