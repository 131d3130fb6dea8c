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
        if let refusal = checkRedis(configuration) {
            EventLog.event(
                "configuration_invalid", level: "error",
                [("setting", .string("SIWA_REDIS_URL")), ("message", .string(refusal))])
            Output.error("siwa-endpoint serve: SIWA_REDIS_URL \(refusal)")
            return 2
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
        let makeStore: @Sendable () -> NotificationStore = {
            NotificationStore(
                connection: RedisConnection(endpoint: redis, connectTimeout: timeout, commandTimeout: timeout),
                keyPrefix: configuration.keyPrefix, seenMarkerTTL: .seconds(configuration.seenTTLSeconds),
                streamMaxLength: configuration.streamMaximumLength)
        }
        let spool = try NotificationSpool(directory: configuration.spoolDirectory)
        let replayer = SpoolReplayer(
            spool: spool, setAside: try SpoolSetAsideStore(spoolDirectory: configuration.spoolDirectory),
            store: makeStore(), metrics: metrics, clientIDs: configuration.clientIDs,
            retentionDays: configuration.spoolRetentionDays, clockMilliseconds: clockMilliseconds)
        if spool.depth > 0 {
            // Replayed by the replayer's first pass, once the socket listens: a long spool
            // must not keep nginx answering 502 after a restart.
            EventLog.event("spool_pending_at_start", level: "warning", [("depth", .integer(Int64(spool.depth)))])
        }

        let responder = NotificationResponder(
            configuration: configuration, keys: keys, stores: NotificationStorePool(makeStore: makeStore), spool: spool,
            replayer: replayer, metrics: metrics, clockMilliseconds: clockMilliseconds)
        let address = try FastCGIListenAddress.parse(
            configuration.fastCGISocket, mode: UInt32(configuration.fastCGISocketMode),
            group: configuration.fastCGISocketGroup)
        let server = try FastCGIServer(
            configuration: FastCGIServerConfiguration(
                address: address, workerCount: configuration.workers, maxBodyBytes: configuration.maximumBodyBytes,
                shutdownTimeout: .seconds(configuration.shutdownTimeoutSeconds)),
            handler: { responder.handle($0) })
        replayer.start()
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

    /// Whether Redis can do the endpoint's work (see `RedisCapabilityCheck`): the refusal
    /// to stop with, or nil to start (a Redis that is only unreachable is an outage: spool).
    static func checkRedis(_ configuration: ServerConfiguration) -> String? {
        // A URL that does not parse is the settings check's to report.
        guard let endpoint = try? RedisEndpoint(parsing: configuration.redisURL) else { return nil }
        let result = RedisCapabilityCheck.run(
            endpoint: endpoint, timeout: .milliseconds(configuration.redisTimeoutMilliseconds),
            keyPrefix: configuration.keyPrefix, streamMaxLength: configuration.streamMaximumLength)
        switch result {
        case .ready: return nil
        case .unavailable(let why):
            EventLog.event("redis_unavailable_at_start", level: "warning", [("reason", .string(why))])
            return nil
        case .refused(let what): return "cannot be used for the endpoint's work: \(what)"
        }
    }
}
