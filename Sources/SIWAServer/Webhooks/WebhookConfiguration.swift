import Foundation
import SIWAHTTPS
import SIWAJSON

/// The format a destination speaks. Only Standard Webhooks 1.0 today; RFC 8935 push of
/// Security Event Tokens would be one more case.
public enum WebhookFormat: String, Sendable, Equatable {
    case standardWebhooks = "standard-webhooks"
}

/// One destination of the destinations file.
public struct WebhookDestination: Sendable {
    public let name: String
    public let url: String
    public let signingKeyFiles: [String]
    /// Read from `signingKeyFiles` at start: a bad file stops the start.
    public let keys: [WebhookSigningKey]
    public let types: Set<String>
    /// nil: every client ID.
    public let clientIDs: Set<String>?
    /// Whether the two email events carry the user's address. Off unless the entry says
    /// `"include_email": true`: an address goes only where it was asked for.
    public let includeEmail: Bool
    public let caFile: String?
    public let allowPrivateAddress: Bool
    public let format: WebhookFormat
    /// One connection kept and reused between calls (default); false: a new one per call.
    public let keepConnection: Bool

    /// Whether this destination takes `event`.
    public func wants(_ event: WebhookEvent) -> Bool {
        types.contains(event.type) && (clientIDs?.contains(event.clientID) ?? true)
    }

    /// The consumer group of this destination, on the events stream and (with
    /// `account-deleted`) on the deletions stream.
    public var group: String { "deliver:" + name }

    /// Whether it takes `account-deleted`, so its group on the deletions stream exists.
    public var takesDeletions: Bool { types.contains("account-deleted") }
}

/// The destinations file (`SIWA_WEBHOOK_DESTINATIONS`), read strictly: an unknown member,
/// a wrong type, a bad name or URL or key file is a named error, refused at start.
public enum WebhookDestinationsFile {
    static let members: Set<String> = [
        "name", "url", "signing_key_files", "types", "client_ids", "include_email", "ca_file",
        "allow_private_address", "format", "keep_connection",
    ]
    public static let maximumBytes = 1 << 20

    public static func load(path: String, readKeys: Bool = true) throws(WebhookSettingError) -> [WebhookDestination] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw WebhookSettingError("cannot read the destinations file \(path)")
        }
        guard data.count <= maximumBytes else { throw WebhookSettingError("the destinations file is over 1 MiB") }
        return try parse(Array(data), readKeys: readKeys)
    }

    public static func parse(_ bytes: [UInt8], readKeys: Bool = true) throws(WebhookSettingError)
        -> [WebhookDestination]
    {
        let document: JSONValue
        do {
            document = try StrictJSONParser.parse(bytes)
        } catch {
            throw WebhookSettingError("the destinations file is not JSON (\(error))")
        }
        guard case .object(let top) = document else {
            throw WebhookSettingError("the destinations file is not an object")
        }
        if let stranger = top.keys.sorted().first(where: { $0 != "destinations" }) {
            throw WebhookSettingError("the destinations file has an unknown member \"\(stranger)\"")
        }
        guard case .array(let list)? = top["destinations"] else {
            throw WebhookSettingError("the destinations file needs \"destinations\", an array")
        }
        var destinations: [WebhookDestination] = []
        for (index, item) in list.enumerated() {
            let destination = try parseDestination(item, index: index, readKeys: readKeys)
            guard !destinations.contains(where: { $0.name == destination.name }) else {
                throw WebhookSettingError("destination \(destination.name) is named twice")
            }
            destinations.append(destination)
        }
        return destinations
    }

    static func parseDestination(_ item: JSONValue, index: Int, readKeys: Bool) throws(WebhookSettingError)
        -> WebhookDestination
    {
        guard case .object(let fields) = item else {
            throw WebhookSettingError("destination \(index) is not an object")
        }
        let label = { () -> String in
            if case .string(let name)? = fields["name"] { return "destination \(name)" }
            return "destination \(index)"
        }()
        func fail(_ text: String) -> WebhookSettingError { WebhookSettingError("\(label): \(text)") }
        if let stranger = fields.keys.sorted().first(where: { !members.contains($0) }) {
            throw fail("unknown member \"\(stranger)\"")
        }
        func string(_ member: String) throws(WebhookSettingError) -> String? {
            switch fields[member] {
            case nil: return nil
            case .string(let text)?: return text
            default: throw fail("\"\(member)\" must be a string")
            }
        }
        func strings(_ member: String) throws(WebhookSettingError) -> [String]? {
            switch fields[member] {
            case nil: return nil
            case .array(let items)?:
                var out: [String] = []
                for item in items {
                    guard case .string(let text) = item else { throw fail("\"\(member)\" must be an array of strings") }
                    out.append(text)
                }
                return out
            default: throw fail("\"\(member)\" must be an array of strings")
            }
        }
        func flag(_ member: String, default value: Bool) throws(WebhookSettingError) -> Bool {
            switch fields[member] {
            case nil: return value
            case .bool(let flag)?: return flag
            default: throw fail("\"\(member)\" must be true or false")
            }
        }
        guard let name = try string("name") else { throw fail("\"name\" is required") }
        guard (1...40).contains(name.utf8.count),
            name.utf8.allSatisfy({ (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D })
        else { throw fail("\"name\" must be 1 to 40 of a-z, 0-9 and -") }
        guard let url = try string("url") else { throw fail("\"url\" is required") }
        let allowPrivate = try flag("allow_private_address", default: false)
        do throws(HTTPSFetchError) {
            try HTTPSFetcher.checkURL(url)
        } catch {
            throw fail("\"url\" must be an https URL: \(error.message)")
        }
        if url.lowercased().hasPrefix("http:"), !allowPrivate {
            throw fail("\"url\" must be https (plain http only to a loopback host with allow_private_address)")
        }
        guard let keyFiles = try strings("signing_key_files"), !keyFiles.isEmpty else {
            throw fail("\"signing_key_files\" is required: at least one key file")
        }
        guard keyFiles.count <= 4 else { throw fail("\"signing_key_files\" holds at most 4 keys (a rotation)") }
        var keys: [WebhookSigningKey] = []
        if readKeys {
            for file in keyFiles {
                do throws(WebhookSettingError) {
                    keys.append(try WebhookSigningKey.load(file: file))
                } catch {
                    throw fail(error.message)
                }
            }
        }
        let types = try strings("types") ?? WebhookEvent.types
        guard !types.isEmpty else { throw fail("\"types\" must name at least one type when present") }
        if let stranger = types.first(where: { !WebhookEvent.types.contains($0) }) {
            throw fail("\"types\" names \(stranger); the types are \(WebhookEvent.types.joined(separator: ", "))")
        }
        let clientIDs = try strings("client_ids")
        if let clientIDs, clientIDs.isEmpty {
            throw fail("\"client_ids\" must name at least one client ID when present")
        }
        let caFile = try string("ca_file")
        if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw fail("cannot read ca_file \(caFile)")
        }
        let formatText = try string("format") ?? WebhookFormat.standardWebhooks.rawValue
        guard let format = WebhookFormat(rawValue: formatText) else {
            throw fail("\"format\" must be standard-webhooks, not \(formatText)")
        }
        return WebhookDestination(
            name: name, url: url, signingKeyFiles: keyFiles, keys: keys, types: Set(types),
            clientIDs: clientIDs.map(Set.init), includeEmail: try flag("include_email", default: false), caFile: caFile,
            allowPrivateAddress: allowPrivate, format: format,
            keepConnection: try flag("keep_connection", default: true))
    }
}

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
