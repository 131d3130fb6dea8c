import Foundation
import SIWAFastCGI
import SIWAHTTPS
import SIWAKeys
import SIWARedis
import SIWASettingKeys
import SIWASpool
import SIWAStore
import SIWAVerification

/// Every setting of `siwa-endpoint serve`, read from `SIWA_*` environment variables
/// (and optionally an env file), checked once at start. A bad value stops the
/// program with a message that names the setting.
///
/// One table (`settings`) holds each setting's name, default, parser and meaning; the
/// table of docs/settings.md, `deploy/env.example` and `serve --help` are checked against it by a test.
/// The parsed values are handed out in typed groups, one per part of the program.
public struct ServerConfiguration: Sendable, Equatable {
    /// The client IDs (bundle IDs or Services IDs) whose notifications this endpoint accepts.
    public var clientIDs: Set<String>
    /// Apple's keys: where from, how often, the cache file.
    public var jwks: JWKSSettings
    /// Google's Cross-Account Protection: served when its client IDs are set.
    public var google: GoogleSettings
    /// Where Redis is and how long a call may take.
    public var redis: RedisSettings
    /// Where the responder listens, with how many workers.
    public var fastCGI: FastCGISettings
    /// How notifications are written into Redis.
    public var store: StoreSettings
    /// Where verified notifications wait while Redis cannot take them.
    public var spool: SpoolSettings
    /// What a request may be and how it is answered.
    public var requests: RequestSettings
    /// How long each client ID may go without a genuine notification before the alert.
    public var silence: SilenceSettings
    /// When `/healthz/ready` says this instance is not ready.
    public var readiness: ReadinessLimits
    /// `SIWA_*` names that are not settings (misspelt?): logged as a warning at start.
    public var unknownSettings: [String]

    /// What every setting's name begins with: such a name that is in no row is warned about.
    static let namePrefix = "SIWA_"

    /// The settings table: one row per setting, in the order of docs/settings.md.
    public static let settings: [Setting] =
        [
            .parsed(
                .clientIDs, default: nil, "comma-separated client IDs served (`aud` must name one)", clientIDList
            ),
            .parsed(
                .jwksURL, default: JWKSProvider.Settings.appleKeysURL,
                "Apple's JWKS; https only (http only to loopback)", httpsURL),
            .optional(.jwksCAFile, shown: "(system trust store)", "CA bundle for the JWKS fetch", readableFile),
            .path(
                .jwksCache, default: "/var/lib/siwa-endpoint/jwks.json",
                "last good JWKS, written atomically, loaded at start"),
            .duration(
                .jwksRefresh, default: JWKSProvider.Settings.defaultRefreshInterval,
                in: JWKSProvider.Settings.refreshIntervalRange, unit: .seconds, "scheduled JWKS refresh"),
            .duration(
                .jwksUnknownKeyIDRefresh, default: JWKSProvider.Settings.defaultUnknownKeyIDRefreshInterval,
                in: JWKSProvider.Settings.unknownKeyIDRefreshIntervalRange, unit: .seconds,
                "at most one refresh per this many seconds on an unknown kid"),
            .duration(
                .jwksTimeout, default: JWKSProvider.Settings.defaultFetchTimeout,
                in: JWKSProvider.Settings.fetchTimeoutRange, unit: .seconds, "whole JWKS fetch timeout"),
            .parsed(
                .redisURL, default: "redis://127.0.0.1:6379/0",
                "`redis://[:password@]host:port/db`, the same over TLS as `rediss://...`, or `unix:///path[?db=N]`",
                redisEndpoint),
            .duration(
                .redisTimeout, default: RedisConnection.defaultTimeout, in: RedisConnection.timeoutRange,
                unit: .milliseconds, "Redis connect and command timeout"),
            .duration(
                .redisRetry, default: RedisCircuitBreaker.defaultRetryInterval,
                in: RedisCircuitBreaker.retryIntervalRange, unit: .milliseconds,
                "after Redis did not answer: requests spool at once, one probe retries this often"),
            .parsed(
                .fastCGISocket, default: "/run/siwa-endpoint/fcgi.sock", "unix socket path, or `127.0.0.1:PORT`",
                listenAddress),
            .parsed(
                .fastCGISocketMode, default: "0660", "unix socket mode (octal), so nginx can connect", socketMode),
            .optional(
                .fastCGISocketGroup, shown: "(process group)", "unix socket group, e.g. `www-data`", groupName),
            .path(
                .spoolDirectory, default: "/var/lib/siwa-endpoint/spool",
                "where verified notifications wait while Redis is down"),
            .parsed(
                .keyPrefix, default: NotificationStore.defaultKeyPrefix,
                "prefix of every Redis key and the channel", keyPrefix),
            .parsed(
                .notificationPath, default: "/apple/notifications", "the path Apple posts to", notificationPath),
            .optional(
                .googleClientIDs, shown: "(none: Google not served)",
                "comma-separated Google OAuth client IDs whose Cross-Account Protection events are received (`aud` must name one); empty: the Google path answers 404",
                clientIDList),
            .parsed(
                .googleConfigurationURL, default: SecurityEventVerifier.googleConfigurationURL,
                "Google's `risc-configuration` document (its `issuer` and `jwks_uri` are used); https only (http only to loopback)",
                httpsURL),
            .parsed(
                .googlePath, default: GoogleSettings.defaultPath, "the path Google pushes its events to",
                notificationPath),
            .integer(
                .workers, shown: "2 per core", default: { FastCGIServerConfiguration.defaultWorkerCount },
                in: FastCGIServerConfiguration.workerCountRange, "FastCGI worker threads, one Redis connection each"),
            .integer(
                .maximumBodyBytes, default: FastCGIServerConfiguration.defaultMaximumBodyBytes,
                in: FastCGIServerConfiguration.maximumBodyBytesRange, "request body limit (413 above it)"),
            .duration(
                .leeway, default: .seconds(NotificationVerifier.defaultLeewaySeconds),
                in: .seconds(NotificationVerifier.leewaySecondsRange.lowerBound)
                    ... .seconds(
                        NotificationVerifier.leewaySecondsRange.upperBound),
                unit: .seconds, "clock leeway for `exp` and `iat`"),
            .duration(
                .seenTTL, default: NotificationStore.defaultSeenMarkerTTL, in: NotificationStore.seenMarkerTTLRange,
                unit: .seconds, "how long a `jti` is remembered for duplicates (30 days)"),
            .integer(
                .streamMaximumLength, default: NotificationStore.defaultStreamMaximumLength,
                in: NotificationStore.streamMaximumLengthRange,
                "approximate cap of the `events` stream"),
            .duration(
                .shutdownTimeout, default: FastCGIServerConfiguration.defaultShutdownTimeout,
                in: FastCGIServerConfiguration.shutdownTimeoutRange, unit: .seconds,
                "one deadline after SIGTERM for requests in flight, the spool replay and the key refresher together"),
            .duration(
                .retryAfter, default: RequestSettings.defaultRetryAfter,
                in: RequestSettings.retryAfterRange,
                unit: .seconds, "the `Retry-After` of a 503"),
            .integer(
                .fastCGIBacklog, default: FastCGIServerConfiguration.defaultBacklog,
                in: FastCGIServerConfiguration.backlogRange,
                "connections queued on the socket while every worker is busy (`net.core.somaxconn` caps it)"),
            .integer(
                .spoolRetentionDays, default: SpoolReplayer.defaultRetentionDays, in: SpoolReplayer.retentionDaysRange,
                "days set-aside and torn spool files are kept, then deleted (logged)"),
            .optional(
                .redisSentinels, shown: "(none)",
                "`host:port,...` of Redis Sentinels; when set, the primary is found through them and `SIWA_REDIS_URL` gives only the database, user and password (its host and port are not used)",
                sentinelList),
            .optional(
                .redisSentinelMaster, shown: "(none)",
                "the master name the sentinels monitor (required with `SIWA_REDIS_SENTINELS`)", sentinelMasterName),
            .optional(
                .redisSentinelPassword, shown: "(none)",
                "password of the sentinels (`requirepass`), when they have one", { text throws(SettingProblem) in text }
            ),
            .integer(
                .redisMinimumReplicas, default: NotificationStore.defaultMinimumReplicas,
                in: NotificationStore.minimumReplicasRange,
                "replicas that must acknowledge a write (`WAIT`) before it counts as safe; fewer: a copy is spooled"),
            .duration(
                .redisReplicaTimeout, default: NotificationStore.defaultReplicaTimeout,
                in: NotificationStore.replicaTimeoutRange, unit: .milliseconds,
                "how long to `WAIT` for those replicas; shorter than `SIWA_REDIS_TIMEOUT_MS` when replicas are asked for"
            ),
            .optional(
                .redisTLSCAFile, shown: "(system trust store)",
                "PEM CA certificates that may sign Redis's (and TLS sentinels') certificate", readableFile),
            .optional(
                .redisTLSCertificateFile, shown: "(none)",
                "PEM client certificate chain, for a Redis that asks for one (mutual TLS); with `SIWA_REDIS_TLS_KEY_FILE`",
                readableFile),
            .optional(
                .redisTLSKeyFile, shown: "(none)", "PEM private key of `SIWA_REDIS_TLS_CERT_FILE`",
                readableFile),
            .optional(
                .redisTLSServerName, shown: "(the host connected to)",
                "the name Redis's certificate must hold, also sent as SNI, when it is not the host of the URL or the address the sentinels give",
                tlsServerName),
            .optional(
                .redisClusterNodes, shown: "(none)",
                "`host:port,...` of Redis Cluster nodes to ask for the slots (any of them); when set, the endpoint writes to the primary of the one slot of `SIWA_KEY_PREFIX`, which must then be a hash tag such as `{siwa}`, and `SIWA_REDIS_URL` gives only the user, password and TLS (`rediss://`)",
                clusterNodeList),
            .parsed(
                .redisSentinelTLS, default: "no",
                "`yes`: the sentinels are reached over TLS too (the same CA, client certificate and server name)",
                yesOrNo),
            .integer(
                .silenceAlertHours, default: SilenceSettings.defaultAlertHours, in: SilenceSettings.alertHoursRange,
                "hours without a genuine notification for a client ID before `SIWANotificationsSilent` fires (0: never); exported as `siwa_client_silence_alert_seconds`"
            ),
            .optional(
                .silenceAlertHoursByClient, shown: "(none)",
                "`client_id=hours,...`: the same per client ID of `SIWA_CLIENT_IDS` (a small app hears rarely, a large one daily)",
                silenceHoursByClient),
            .integer(
                .readySpoolMaximumDepth, default: ReadinessLimits.defaultSpoolMaximumDepth,
                in: ReadinessLimits.spoolMaximumDepthRange,
                "records waiting in the spool beyond which `/healthz/ready` answers 503 `spool_too_deep` (0: no limit)"),
            .duration(
                .readySpoolMaximumAge, default: ReadinessLimits.defaultSpoolMaximumAge,
                in: ReadinessLimits.spoolMaximumAgeRange, unit: .seconds,
                "age of the oldest waiting spool record beyond which `/healthz/ready` answers 503 `spool_too_old` (0: no limit)"
            ),
            .duration(
                .healthPingTimeout, default: ReadinessLimits.defaultHealthPingTimeout,
                in: ReadinessLimits.healthPingTimeoutRange, unit: .milliseconds,
                "how long `/healthz` waits for Redis's PING; past it `/healthz` answers 503 `ping_timeout` (raise it for a Redis far away; keep it under the probe's own timeout). `/healthz/ready` waits the shorter of this and 80 ms"
            ),
        ] + AppleAPIConfiguration.appleSettings + WebhookConfiguration.webhookSettings
        + GoogleManagementConfiguration.googleSettings

    /// Reads the settings from `environment`, after the lines of `envFile` (`NAME=value`,
    /// `#` comments); the process environment wins over the file.
    public init(environment: [String: String], envFile: String? = nil) throws(ConfigurationError) {
        let values = try Self.settingText(environment: environment, envFile: envFile)
        unknownSettings = Self.unknownNames(in: values)
        let parsed = try SettingValues(table: Self.settings, text: values)

        clientIDs = try parsed[.clientIDs]
        let workers: Int = try parsed[.workers]
        jwks = JWKSSettings(
            provider: JWKSProvider.Settings(
                url: try parsed[.jwksURL], cacheFilePath: try parsed[.jwksCache],
                refreshInterval: try parsed[.jwksRefresh],
                unknownKeyIDRefreshInterval: try parsed[.jwksUnknownKeyIDRefresh],
                // A lone worker never waits for a fetch: /healthz and known kids would wait with it.
                unknownKeyIDWaiters: workers > 1 ? 1 : 0),
            caFile: try parsed[.jwksCAFile], timeout: try parsed[.jwksTimeout])
        google = GoogleSettings(
            clientIDs: try parsed[.googleClientIDs] ?? [], path: try parsed[.googlePath],
            keys: JWKSProvider.Settings(
                url: try parsed[.googleConfigurationURL],
                cacheFilePath: GoogleSettings.cacheFilePath(besideApplesAt: try parsed[.jwksCache]),
                refreshInterval: try parsed[.jwksRefresh],
                unknownKeyIDRefreshInterval: try parsed[.jwksUnknownKeyIDRefresh],
                unknownKeyIDWaiters: workers > 1 ? 1 : 0))
        redis = try Self.redisSettings(parsed, text: values)
        let socket: FastCGIListenAddress = try parsed[.fastCGISocket]
        let mode: UInt32 = try parsed[.fastCGISocketMode]
        let group: String? = try parsed[.fastCGISocketGroup]
        let backlog: Int = try parsed[.fastCGIBacklog]
        fastCGI = FastCGISettings(
            socket: Self.text(of: SettingKey.fastCGISocket, in: values),
            server: FastCGIServerConfiguration(
                address: socket.with(mode: mode, group: group), workerCount: try parsed[.workers],
                maximumBodyBytes: try parsed[.maximumBodyBytes], backlog: Int32(backlog),
                shutdownTimeout: try parsed[.shutdownTimeout]))
        store = StoreSettings(
            keyPrefix: try parsed[.keyPrefix], seenMarkerTTL: try parsed[.seenTTL],
            streamMaximumLength: try parsed[.streamMaximumLength])
        try Self.checkRedisComponents(redis: redis, store: store)
        spool = SpoolSettings(directory: try parsed[.spoolDirectory], retentionDays: try parsed[.spoolRetentionDays])
        requests = RequestSettings(
            notificationPath: try parsed[.notificationPath], leeway: try parsed[.leeway],
            retryAfter: try parsed[.retryAfter])
        silence = SilenceSettings(
            defaultHours: try parsed[.silenceAlertHours], hoursByClient: try parsed[.silenceAlertHoursByClient] ?? [:])
        readiness = ReadinessLimits(
            spoolMaximumDepth: try parsed[.readySpoolMaximumDepth], spoolMaximumAge: try parsed[.readySpoolMaximumAge],
            healthPingTimeout: try parsed[.healthPingTimeout])
        if !google.clientIDs.isEmpty, google.path == requests.notificationPath {
            throw ConfigurationError(
                SettingKey.googlePath, "is the path of Apple's notifications (\(SettingKey.notificationPath.name))")
        }
        if let stranger = silence.hoursByClient.keys.sorted().first(where: { !clientIDs.contains($0) }) {
            throw ConfigurationError(
                setting: SettingKey<[String: Int]?>.silenceAlertHoursByClient.name,
                "names \(stranger), which is not in \(SettingKey.clientIDs.name)")
        }
        if let reserved = [RequestSettings.unlistedClientLabel, RequestSettings.noneClientLabel].first(
            where: clientIDs.contains)
        {
            throw ConfigurationError(
                setting: SettingKey<Set<String>>.clientIDs.name,
                "holds \(reserved), the metrics' label for refusals of other client IDs")
        }
    }

    /// The `SIWA_*` values of `environment`, after the lines of `envFile` (`NAME=value`,
    /// `#` comments, optional quotes); the process environment wins over the file.
    static func settingText(environment: [String: String], envFile: String?) throws(ConfigurationError) -> [String:
        String]
    {
        var values: [String: String] = [:]
        if let envFile { values = try readEnvFile(envFile) }
        for (name, value) in environment where name.hasPrefix(namePrefix) { values[name] = value }
        return values
    }

    /// `SIWA_*` names that are in no row of the table (misspelt?). Warned about, not
    /// refused: other tools may share the prefix in a shell's environment.
    static func unknownNames(in values: [String: String]) -> [String] {
        let knownNames = Set(settings.map(\.name))
        return values.keys.filter { $0.hasPrefix(namePrefix) && !knownNames.contains($0) }.sorted()
    }

    /// The Redis group, read the same way by every command that talks to serve's Redis.
    static func redisSettings(_ parsed: SettingValues, text values: [String: String]) throws(ConfigurationError)
        -> RedisSettings
    {
        let sentinel = try sentinelSettings(
            sentinels: try parsed[.redisSentinels], master: try parsed[.redisSentinelMaster],
            password: try parsed[.redisSentinelPassword])
        let timeout: Duration = try parsed[.redisTimeout]
        let replicaTimeout: Duration = try parsed[.redisReplicaTimeout]
        let minimumReplicas: Int = try parsed[.redisMinimumReplicas]
        // WAIT runs on the connection's command timeout: a longer replica wait could never
        // end by itself, and every write would count as a shortfall.
        if minimumReplicas > 0 && replicaTimeout >= timeout {
            throw ConfigurationError(
                SettingKey.redisReplicaTimeout,
                "must be shorter than \(SettingKey.redisTimeout.name) (\(Int(timeout / .milliseconds(1))) ms) when "
                    + "\(SettingKey.redisMinimumReplicas.name) is above 0: WAIT runs within the command timeout")
        }
        var endpoint: RedisEndpoint = try parsed[.redisURL]
        var sentinelWithTLS = sentinel
        let sentinelsUseTLS: Bool = try parsed[.redisSentinelTLS]
        let tls = try redisTLS(parsed, urlUsesTLS: endpoint.tls != nil, sentinelsUseTLS: sentinelsUseTLS)
        if sentinelsUseTLS {
            guard sentinel != nil else {
                throw ConfigurationError(
                    setting: "SIWA_REDIS_SENTINEL_TLS", "is yes but SIWA_REDIS_SENTINELS is not set: name the sentinels"
                )
            }
            sentinelWithTLS?.tls = tls
        }
        if endpoint.tls != nil { endpoint.tls = tls }
        let topology = try redisTopology(
            sentinel: sentinelWithTLS, clusterNodes: try parsed[.redisClusterNodes], endpoint: endpoint,
            keyPrefix: try parsed[.keyPrefix])
        return RedisSettings(
            url: text(of: SettingKey.redisURL, in: values),
            endpoint: endpoint,
            timeout: try parsed[.redisTimeout], topology: topology,
            minimumReplicas: try parsed[.redisMinimumReplicas], replicaTimeout: try parsed[.redisReplicaTimeout],
            circuitRetryInterval: try parsed[.redisRetry])
    }

    /// The Redis connection and the store check the values read for them with their own
    /// `validate()` (the table's bounds are theirs, so this refuses only a table that
    /// disagrees with its component); a refusal names the row. The store checks one value at
    /// a time, the others at its defaults, so the refusal names the row that failed.
    static func checkRedisComponents(redis: RedisSettings, store: StoreSettings) throws(ConfigurationError) {
        let connection = RedisConnection(
            endpoint: redis.endpoint, connectTimeout: redis.timeout, commandTimeout: redis.timeout)
        do throws(RedisError) {
            try connection.validate()
        } catch {
            throw ConfigurationError(SettingKey.redisTimeout, error.message)
        }
        let oneValueEach: [(setting: String, store: NotificationStore)] = [
            (SettingKey.seenTTL.name, NotificationStore(connection: connection, seenMarkerTTL: store.seenMarkerTTL)),
            (
                SettingKey.streamMaximumLength.name,
                NotificationStore(connection: connection, streamMaximumLength: store.streamMaximumLength)
            ),
            (
                SettingKey.redisMinimumReplicas.name,
                NotificationStore(connection: connection, minimumReplicas: redis.minimumReplicas)
            ),
            (
                SettingKey.redisReplicaTimeout.name,
                NotificationStore(connection: connection, replicaTimeout: redis.replicaTimeout)
            ),
        ]
        for (setting, oneValue) in oneValueEach {
            do throws(RedisError) {
                try oneValue.validate()
            } catch {
                throw ConfigurationError(setting: setting, error.message)
            }
        }
    }

    /// The TLS files and name, when `rediss://` or `SIWA_REDIS_SENTINEL_TLS` asks for TLS; the
    /// files are loaded now, so a CA file that holds no certificate or a key that does not
    /// match its certificate stops the start, naming the setting.
    static func redisTLS(_ parsed: SettingValues, urlUsesTLS: Bool, sentinelsUseTLS: Bool) throws(ConfigurationError)
        -> RedisTLS
    {
        let tls = RedisTLS(
            caFile: try parsed[.redisTLSCAFile], certificateFile: try parsed[.redisTLSCertificateFile],
            keyFile: try parsed[.redisTLSKeyFile], serverName: try parsed[.redisTLSServerName])
        let given: [(name: String, isSet: Bool)] = [
            (SettingKey.redisTLSCAFile.name, tls.caFile != nil),
            (SettingKey.redisTLSCertificateFile.name, tls.certificateFile != nil),
            (SettingKey.redisTLSKeyFile.name, tls.keyFile != nil),
            (SettingKey.redisTLSServerName.name, tls.serverName != nil),
        ]
        guard urlUsesTLS || sentinelsUseTLS else {
            // A TLS setting that would be ignored: Redis would be reached in plain text.
            if let ignored = given.first(where: \.isSet) {
                throw ConfigurationError(
                    setting: ignored.name,
                    "is set but TLS is off: SIWA_REDIS_URL is not rediss:// and SIWA_REDIS_SENTINEL_TLS is not yes")
            }
            return tls
        }
        if (tls.certificateFile == nil) != (tls.keyFile == nil) {
            let missing =
                tls.certificateFile == nil ? SettingKey.redisTLSCertificateFile.name : SettingKey.redisTLSKeyFile.name
            throw ConfigurationError(
                setting: missing,
                "is required with the other of \(SettingKey.redisTLSCertificateFile.name) and \(SettingKey.redisTLSKeyFile.name)"
            )
        }
        do throws(RedisError) {
            try tls.check()
        } catch {
            // The file the error is about; the system trust store counts as the CA setting's.
            let setting = error.field?.setting ?? SettingKey.redisTLSCAFile.name
            throw ConfigurationError(setting: setting, "cannot be used for TLS to Redis: \(error.operatorMessage)")
        }
        return tls
    }

    /// A setting's text as given, else its documented default.
    static func text<Value>(of key: SettingKey<Value>, in values: [String: String]) -> String {
        values[key.name] ?? defaultValue(of: key.name)
    }

    /// The documented default of a row (for rows whose default is a literal value).
    static func defaultValue(of name: String) -> String {
        settings.first { $0.name == name }?.defaultValue ?? ""
    }

    private static func readEnvFile(_ envFile: String) throws(ConfigurationError) -> [String: String] {
        // Read to its end, whatever it is: an empty file (or /dev/null) holds no setting and is valid.
        guard let handle = FileHandle(forReadingAtPath: envFile), let bytes = try? handle.readToEnd() ?? Data(),
            let text = bytes.isEmpty ? "" : String(data: bytes, encoding: .utf8)
        else {
            throw ConfigurationError(setting: "--env-file", "cannot read \(envFile)")
        }
        var values: [String: String] = [:]
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let equals = line.firstIndex(of: "="), equals != line.startIndex else {
                throw ConfigurationError(setting: "--env-file", "line \(number + 1) of \(envFile) is not NAME=value")
            }
            var value = String(line[line.index(after: equals)...])
            if value.count >= 2, value.first == value.last, value.first == "\"" || value.first == "'" {
                value = String(value.dropFirst().dropLast())
            }
            values[String(line[..<equals])] = value
        }
        return values
    }
}
