import Foundation

/// Every setting of `siwa-endpoint serve`, read from `SIWA_*` environment variables
/// (and optionally an env file), checked once at start. A bad value stops the
/// program with a message that names the setting.
public struct ServerConfiguration: Sendable, Equatable {
    /// The client IDs (bundle IDs or Services IDs) whose notifications this endpoint accepts.
    public var clientIDs: Set<String>
    public var jwksURL: String
    /// A CA bundle for the JWKS fetch (tests and private mirrors); nil means the system store.
    public var jwksCAFile: String?
    public var jwksCachePath: String
    public var jwksRefreshSeconds: Int
    public var jwksUnknownKeyIDRefreshSeconds: Int
    public var jwksTimeoutSeconds: Int
    public var redisURL: String
    public var redisTimeoutMilliseconds: Int
    /// A unix socket path, or `127.0.0.1:PORT` / `[::1]:PORT` for loopback TCP.
    public var fastCGISocket: String
    public var fastCGISocketMode: UInt16
    public var fastCGISocketGroup: String?
    public var spoolDirectory: String
    public var keyPrefix: String
    public var notificationPath: String
    public var workers: Int
    public var maximumBodyBytes: Int
    public var leewaySeconds: Int
    public var seenTTLSeconds: Int
    public var streamMaximumLength: Int
    public var shutdownTimeoutSeconds: Int
    public var retryAfterSeconds: Int
    /// `SIWA_*` names that are not settings (misspelt?): logged as a warning at start.
    public var unknownSettings: [String]

    /// One row per setting: name, default (nil when required), meaning. The README's table.
    public static let settings: [(name: String, defaultValue: String?, meaning: String)] =
        [
            ("SIWA_CLIENT_IDS", nil, "comma-separated client IDs served (`aud` must name one)"),
            (
                "SIWA_JWKS_URL", "https://appleid.apple.com/auth/keys",
                "Apple's JWKS; https only (http only to loopback)"
            ),
            ("SIWA_JWKS_CA_FILE", "(system trust store)", "CA bundle for the JWKS fetch"),
            (
                "SIWA_JWKS_CACHE", "/var/lib/siwa-endpoint/jwks.json",
                "last good JWKS, written atomically, loaded at start"
            ),
            ("SIWA_JWKS_REFRESH_SECONDS", "3600", "scheduled JWKS refresh"),
            (
                "SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS", "60",
                "at most one refresh per this many seconds on an unknown kid"
            ),
            ("SIWA_JWKS_TIMEOUT_SECONDS", "5", "whole JWKS fetch timeout"),
            (
                "SIWA_REDIS_URL", "redis://127.0.0.1:6379/0",
                "`redis://[:password@]host:port/db` or `unix:///path[?db=N]`"
            ),
            ("SIWA_REDIS_TIMEOUT_MS", "1000", "Redis connect and command timeout"),
            ("SIWA_FCGI_SOCKET", "/run/siwa-endpoint/fcgi.sock", "unix socket path, or `127.0.0.1:PORT`"),
            ("SIWA_FCGI_SOCKET_MODE", "0660", "unix socket mode (octal), so nginx can connect"),
            ("SIWA_FCGI_SOCKET_GROUP", "(process group)", "unix socket group, e.g. `www-data`"),
            ("SIWA_SPOOL_DIR", "/var/lib/siwa-endpoint/spool", "where verified notifications wait while Redis is down"),
            ("SIWA_KEY_PREFIX", "siwa", "prefix of every Redis key and the channel"),
            ("SIWA_NOTIFICATION_PATH", "/apple/notifications", "the path Apple posts to"),
            ("SIWA_WORKERS", "2 per core", "FastCGI worker threads, one Redis connection each"),
            ("SIWA_MAX_BODY_BYTES", "65536", "request body limit (413 above it)"),
            ("SIWA_LEEWAY_SECONDS", "60", "clock leeway for `exp` and `iat`"),
            ("SIWA_SEEN_TTL_SECONDS", "2592000", "how long a `jti` is remembered for duplicates (30 days)"),
            ("SIWA_STREAM_MAXLEN", "1000000", "approximate cap of the `events` stream"),
            ("SIWA_SHUTDOWN_TIMEOUT_SECONDS", "10", "how long SIGTERM waits for requests in flight"),
            ("SIWA_RETRY_AFTER_SECONDS", "30", "the `Retry-After` of a 503"),
        ] + ReconcileConfiguration.appleSettings

    /// Reads the settings from `environment`, after the lines of `envFile` (`NAME=value`,
    /// `#` comments); the process environment wins over the file.
    public init(environment: [String: String], envFile: String? = nil) throws(ConfigurationError) {
        let values = try SettingReader.values(environment: environment, envFile: envFile)

        let knownNames = Set(Self.settings.map(\.name))
        // Warned about, not refused: other tools may share the prefix in a shell's environment.
        unknownSettings = values.keys.filter { $0.hasPrefix("SIWA_") && !knownNames.contains($0) }.sorted()
        let reader = SettingReader(values: values)

        guard let ids = values["SIWA_CLIENT_IDS"] else {
            throw ConfigurationError(setting: "SIWA_CLIENT_IDS", "is required: the client IDs this endpoint serves")
        }
        let list = ids.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard !list.isEmpty, list.allSatisfy(Self.isValidClientID) else {
            throw ConfigurationError(
                setting: "SIWA_CLIENT_IDS",
                "must be a comma-separated list of client IDs (visible ASCII, no braces or colons)")
        }
        clientIDs = Set(list)

        jwksURL = try reader.httpsURL("SIWA_JWKS_URL", default: "https://appleid.apple.com/auth/keys")
        jwksCAFile = values["SIWA_JWKS_CA_FILE"]
        if let jwksCAFile, !FileManager.default.isReadableFile(atPath: jwksCAFile) {
            throw ConfigurationError(setting: "SIWA_JWKS_CA_FILE", "cannot read \(jwksCAFile)")
        }
        jwksCachePath = try reader.path("SIWA_JWKS_CACHE", default: "/var/lib/siwa-endpoint/jwks.json")
        jwksRefreshSeconds = try reader.integer("SIWA_JWKS_REFRESH_SECONDS", default: 3600, in: 60...86_400)
        jwksUnknownKeyIDRefreshSeconds = try reader.integer(
            "SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS", default: 60, in: 1...3600)
        jwksTimeoutSeconds = try reader.integer("SIWA_JWKS_TIMEOUT_SECONDS", default: 5, in: 1...60)

        redisURL = try reader.redisURL()
        redisTimeoutMilliseconds = try reader.integer("SIWA_REDIS_TIMEOUT_MS", default: 1000, in: 10...60_000)

        fastCGISocket = values["SIWA_FCGI_SOCKET"] ?? "/run/siwa-endpoint/fcgi.sock"
        guard fastCGISocket.hasPrefix("/") || Self.isLoopbackAddress(fastCGISocket) else {
            throw ConfigurationError(
                setting: "SIWA_FCGI_SOCKET", "must be an absolute unix socket path or a loopback 127.0.0.1:PORT")
        }
        let modeText = values["SIWA_FCGI_SOCKET_MODE"] ?? "0660"
        guard let mode = UInt16(modeText, radix: 8), mode <= 0o777 else {
            throw ConfigurationError(setting: "SIWA_FCGI_SOCKET_MODE", "must be an octal mode such as 0660")
        }
        fastCGISocketMode = mode
        fastCGISocketGroup = values["SIWA_FCGI_SOCKET_GROUP"].flatMap { $0.isEmpty ? nil : $0 }

        spoolDirectory = try reader.path("SIWA_SPOOL_DIR", default: "/var/lib/siwa-endpoint/spool")
        keyPrefix = try reader.keyPrefix()
        notificationPath = values["SIWA_NOTIFICATION_PATH"] ?? "/apple/notifications"
        guard notificationPath.hasPrefix("/"), !notificationPath.contains("?"), !notificationPath.contains(" "),
            notificationPath != "/healthz", notificationPath != "/metrics"
        else {
            throw ConfigurationError(
                setting: "SIWA_NOTIFICATION_PATH", "must be an absolute path other than /healthz and /metrics")
        }
        workers = try reader.integer(
            "SIWA_WORKERS", default: 2 * ProcessInfo.processInfo.activeProcessorCount, in: 1...256)
        maximumBodyBytes = try reader.integer("SIWA_MAX_BODY_BYTES", default: 65_536, in: 1024...1_048_576)
        leewaySeconds = try reader.integer("SIWA_LEEWAY_SECONDS", default: 60, in: 0...600)
        seenTTLSeconds = try reader.integer("SIWA_SEEN_TTL_SECONDS", default: 2_592_000, in: 60...31_536_000)
        streamMaximumLength = try reader.integer("SIWA_STREAM_MAXLEN", default: 1_000_000, in: 1000...1_000_000_000)
        shutdownTimeoutSeconds = try reader.integer("SIWA_SHUTDOWN_TIMEOUT_SECONDS", default: 10, in: 1...300)
        retryAfterSeconds = try reader.integer("SIWA_RETRY_AFTER_SECONDS", default: 30, in: 1...3600)
    }

    static func isValidClientID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 255
            && id.utf8.allSatisfy {
                $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "{") && $0 != UInt8(ascii: "}") && $0 != UInt8(ascii: ":")
            }
    }

    static func isLoopbackAddress(_ address: String) -> Bool {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]),
            (1...65_535).contains(port)
        else { return false }
        let host = String(address[..<colon])
        return host == "[::1]" || (host.hasPrefix("127.") && host.split(separator: ".").count == 4)
    }
}

/// A setting that cannot be used; the message names it.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public let setting: String
    public let problem: String

    init(setting: String, _ problem: String) {
        self.setting = setting
        self.problem = problem
    }

    public var description: String { "\(setting) \(problem)" }
}
