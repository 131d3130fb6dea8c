import Foundation
import SIWAHTTPS
import SIWAJSON
import SIWASettingKeys
import SIWAWebhooks

extension SettingKey where Value == String {
    public static var webhookDestinations: Self { Self("SIWA_WEBHOOK_DESTINATIONS") }
    public static var webhookMetricsListen: Self { Self("SIWA_WEBHOOK_METRICS_LISTEN") }
}

extension SettingKey where Value == String? {
    public static var webhookConsumer: Self { Self("SIWA_WEBHOOK_CONSUMER") }
}

extension SettingKey where Value == Duration {
    public static var webhookConnectTimeout: Self { Self("SIWA_WEBHOOK_CONNECT_TIMEOUT_MS") }
    public static var webhookTimeout: Self { Self("SIWA_WEBHOOK_TIMEOUT_MS") }
    public static var webhookClaimIdle: Self { Self("SIWA_WEBHOOK_CLAIM_IDLE_MS") }
    public static var webhookKeepAlive: Self { Self("SIWA_WEBHOOK_KEEPALIVE_MS") }
}

extension SettingKey where Value == Double {
    public static var webhookRetryScale: Self { Self("SIWA_WEBHOOK_RETRY_SCALE") }
}

/// The settings of `siwa-endpoint deliver`: the destinations file and the delivery bounds,
/// plus serve's Redis settings (the same rows, so one value means the same everywhere).
public struct WebhookConfiguration: Sendable {
    public static let defaultDestinationsPath = "/etc/siwa-endpoint/webhooks.json"
    public static let defaultMetricsListen = "127.0.0.1:9478"
    public static let defaultConnectTimeout: Duration = .milliseconds(5000)
    public static let connectTimeoutRange: ClosedRange<Duration> = .milliseconds(100)...(.milliseconds(60_000))
    public static let defaultTimeout: Duration = .milliseconds(15_000)
    public static let timeoutRange: ClosedRange<Duration> = .milliseconds(1000)...(.milliseconds(120_000))
    public static let defaultClaimIdle: Duration = .milliseconds(60_000)
    public static let claimIdleRange: ClosedRange<Duration> = .milliseconds(1000)...(.milliseconds(86_400_000))
    public static let defaultKeepAlive: Duration = HTTPSPostSession.defaultIdleLimit
    public static let keepAliveRange: ClosedRange<Duration> = .milliseconds(1000)...(.milliseconds(300_000))

    /// deliver's own rows, part of the one settings table.
    public static let webhookSettings: [Setting] = [
        .path(
            .webhookDestinations, default: defaultDestinationsPath,
            "deliver only: the JSON file of webhook destinations (docs/operations.md, \"Webhooks\")"),
        .duration(
            .webhookConnectTimeout, default: defaultConnectTimeout, in: connectTimeoutRange, unit: .milliseconds,
            "deliver only: bound of one webhook's connect (TCP and TLS)"),
        .duration(
            .webhookTimeout, default: defaultTimeout, in: timeoutRange, unit: .milliseconds,
            "deliver only: bound of one webhook call, connect to the last byte of the answer"),
        .duration(
            .webhookKeepAlive, default: defaultKeepAlive, in: keepAliveRange, unit: .milliseconds,
            "deliver only: a destination's kept connection unused this long is closed (the next event opens a new one)"
        ),
        .duration(
            .webhookClaimIdle, default: defaultClaimIdle, in: claimIdleRange, unit: .milliseconds,
            "deliver only: events a stopped deliverer held are taken over by another after this long"),
        .parsed(
            .webhookMetricsListen, default: defaultMetricsListen,
            "deliver only: `host:port` of the deliverer's plain-HTTP `GET /metrics` (Prometheus text)", listenAddress),
        .optional(
            .webhookConsumer, shown: "(host name and process ID)",
            "deliver only: this deliverer's consumer name in the delivery groups", consumerName),
        .parsed(
            .webhookRetryScale, default: "1",
            "for tests only: multiplies the retry schedule and the Retry-After cap (`0.001`: milliseconds for seconds)",
            retryScale),
    ]

    /// The rows deliver reads: its own and serve's Redis rows.
    static var table: [Setting] {
        let sharedNames: Set<String> = ["SIWA_KEY_PREFIX", "SIWA_STREAM_MAXLEN"]
        return ServerConfiguration.settings.filter { $0.name.hasPrefix("SIWA_REDIS_") || sharedNames.contains($0.name) }
            + webhookSettings
    }

    public var destinationsPath: String
    public var destinations: [WebhookDestination]
    public var connectTimeout: Duration
    public var timeout: Duration
    public var keepAlive: Duration
    public var claimIdle: Duration
    public var metricsListen: (host: String, port: Int)
    public var consumer: String
    public var retryScale: Double
    public var redis: RedisSettings
    public var keyPrefix: String
    public var streamMaximumLength: Int
    public var unknownSettings: [String]

    /// Reads the settings and the destinations file (and every key file); a problem is a
    /// `ConfigurationError` naming the setting (`SIWA_WEBHOOK_DESTINATIONS` for the file's).
    public init(environment: [String: String], envFile: String? = nil, readKeys: Bool = true)
        throws(ConfigurationError)
    {
        let values = try ServerConfiguration.settingText(environment: environment, envFile: envFile)
        unknownSettings = ServerConfiguration.unknownNames(in: values)
        let parsed = try SettingValues(table: Self.table, text: values)
        destinationsPath = try parsed[.webhookDestinations]
        do throws(WebhookSettingError) {
            destinations = try WebhookDestinationsFile.load(path: destinationsPath, readKeys: readKeys)
        } catch {
            throw ConfigurationError(setting: "SIWA_WEBHOOK_DESTINATIONS", error.message)
        }
        connectTimeout = try parsed[.webhookConnectTimeout]
        timeout = try parsed[.webhookTimeout]
        keepAlive = try parsed[.webhookKeepAlive]
        claimIdle = try parsed[.webhookClaimIdle]
        let listen: String = try parsed[.webhookMetricsListen]
        metricsListen = try Self.splitListen(listen)
        let hostName = ProcessInfo.processInfo.hostName
        consumer = try parsed[.webhookConsumer] ?? "\(hostName)-\(getpid())"
        retryScale = try parsed[.webhookRetryScale]
        redis = try ServerConfiguration.redisSettings(parsed, text: values)
        keyPrefix = try parsed[.keyPrefix]
        streamMaximumLength = try parsed[.streamMaximumLength]
    }

    static func splitListen(_ text: String) throws(ConfigurationError) -> (host: String, port: Int) {
        do throws(SettingProblem) {
            _ = try listenAddress(text)
        } catch {
            throw ConfigurationError(setting: "SIWA_WEBHOOK_METRICS_LISTEN", error.text)
        }
        let colon = text.lastIndex(of: ":")!
        return (String(text[..<colon]), Int(text[text.index(after: colon)...])!)
    }

    /// `host:port`, the host an IPv4 address or `localhost`, the port 1 to 65535.
    @Sendable static func listenAddress(_ text: String) throws(SettingProblem) -> String {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (1...65_535).contains(port)
        else { throw SettingProblem("must be host:port (127.0.0.1:9478), got \"\(text)\"") }
        let host = String(text[..<colon])
        var address = in_addr()
        guard host == "localhost" || inet_pton(AF_INET, host, &address) == 1 else {
            throw SettingProblem("must be an IPv4 address and a port (127.0.0.1:9478), got \"\(text)\"")
        }
        return text
    }

    @Sendable static func consumerName(_ text: String) throws(SettingProblem) -> String {
        guard (1...100).contains(text.utf8.count), text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw SettingProblem("must be 1 to 100 printable characters without spaces")
        }
        return text
    }

    @Sendable static func retryScale(_ text: String) throws(SettingProblem) -> Double {
        guard let value = Double(text), value >= 0.00001, value <= 1 else {
            throw SettingProblem("must be a number from 0.00001 to 1, got \"\(text)\"")
        }
        return value
    }

    /// `deliver --help`'s lines: deliver's own rows.
    public static var helpLines: [String] {
        webhookSettings.map { "  \($0.name) (default: \($0.defaultValue ?? "required")): \($0.meaning)" }
    }
}
