import Foundation
import SIWAGoogleAPI
import SIWAHTTPS
import SIWASettingKeys

/// The settings of `siwa-endpoint google`: the service account's key file, the management
/// API, the receiver URL Google pushes to, plus serve's Redis settings (`google verify` reads
/// the verification key serve writes). Rows of the one settings table, so serve knows them and
/// does not warn about them; serve never reads the key file.
public struct GoogleManagementConfiguration: Sendable {
    public static let googleSettings: [Setting] = [
        .optional(
            .googleServiceAccountFile, shown: "(required by `google`)",
            "google: the service account's JSON key file (Google's format), a regular file owned by the user running the command, mode 0600 or 0400",
            { text throws(SettingProblem) in text }),
        .parsed(
            .googleRISCAPIURL, default: GoogleManagementClient.defaultAPIURL,
            "google: the RISC management API; https only (http only to loopback)", ServerConfiguration.httpsURL),
        .optional(
            .googleReceiverURL, shown: "(required by `google register`)",
            "google register: the public https URL Google pushes to, this endpoint's Google location (e.g. `https://example.com/google/risc`)",
            receiverURL),
        .optional(
            .googleCAFile, shown: "(system trust store)", "google: CA bundle for the RISC management API",
            { text throws(SettingProblem) in text }),
    ]

    /// The rows `google` reads: its own, serve's Redis settings and the key prefix.
    static var table: [Setting] {
        ServerConfiguration.settings.filter { $0.name.hasPrefix("SIWA_REDIS_") || $0.name == SettingKey.keyPrefix.name }
            + googleSettings
    }

    /// `google --help`'s lines: the command's own rows.
    public static var helpLines: [String] {
        googleSettings.map { "  \($0.name) (default: \($0.defaultValue ?? "required")): \($0.meaning)" }
    }

    public var serviceAccountFile: String
    public var apiURL: String
    /// Required by `register` only (the command says so when it is missing).
    public var receiverURL: String?
    public var caFile: String?
    /// serve's Redis group (Sentinel and Cluster included), for `verify`.
    public var redis: RedisSettings
    public var keyPrefix: String
    /// `SIWA_*` names in no row of the table: warned about at start.
    public var unknownSettings: [String]

    public init(environment: [String: String], envFile: String? = nil) throws(ConfigurationError) {
        let values = try ServerConfiguration.settingText(environment: environment, envFile: envFile)
        unknownSettings = ServerConfiguration.unknownNames(in: values)
        let parsed = try SettingValues(table: Self.table, text: values)
        guard let file: String = try parsed[.googleServiceAccountFile] else {
            throw ConfigurationError(
                SettingKey.googleServiceAccountFile,
                "is required: the JSON key file of a service account with the RISC Configuration Admin role")
        }
        serviceAccountFile = file
        apiURL = try parsed[.googleRISCAPIURL]
        receiverURL = try parsed[.googleReceiverURL]
        caFile = try parsed[.googleCAFile]
        if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw ConfigurationError(SettingKey.googleCAFile, "cannot read \(caFile)")
        }
        redis = try ServerConfiguration.redisSettings(parsed, text: values)
        keyPrefix = try parsed[.keyPrefix]
    }

    /// The receiver URL: https only (Google pushes nowhere else, and refuses it with a 403
    /// after the fact), a host, no user name or password, no fragment.
    @Sendable static func receiverURL(_ text: String) throws(SettingProblem) -> String {
        guard text.lowercased().hasPrefix("https://") else {
            throw SettingProblem("must be an https URL: Google pushes only over HTTPS")
        }
        do throws(HTTPSFetchError) {
            try HTTPSFetcher.checkURL(text)
        } catch {
            throw SettingProblem("must be an https URL: \(error.message)")
        }
        let authority = text.dropFirst("https://".count).prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !authority.contains("@"), !text.contains("#"),
            text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
        else {
            throw SettingProblem("must be a plain https URL (no user name, password, fragment or spaces)")
        }
        return text
    }
}
