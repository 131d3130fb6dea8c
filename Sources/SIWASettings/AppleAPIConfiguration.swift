import Foundation
import SIWAAppleAPI
import SIWACrypto
import SIWASettingKeys

/// The Apple API settings of reconcile, revoke, canary and transfer (named for
/// reconcile, the first of them, until now): Apple's token endpoint and the key that
/// signs the client secret, plus the Redis settings `serve` uses (the same rows of the
/// same table, so one value means the same in both). Read from `SIWA_*` environment
/// variables and optionally an env file; a bad value stops the run with a message naming
/// the setting.
public struct AppleAPIConfiguration: Sendable {
    public static let defaultTokenURL = "https://appleid.apple.com/auth/token"

    /// The rows only reconcile reads, part of the one settings table (so `serve` knows
    /// them and does not warn about them), marked as reconcile's. What `serve` checks is
    /// their form; the key file and the CA file are read by reconcile alone.
    static let appleSettings: [Setting] = [
        .optional(
            .appleTeamID, shown: "(required by the Apple commands)",
            "reconcile, revoke, canary, transfer: your Apple team ID (the client secret's `iss`); for transfer, the team running it",
            { text throws(SettingProblem) in
                try appleIdentifier(text, what: "team ID")
            }),
        .optional(
            .appleKeyID, shown: "(required by the Apple commands)",
            "reconcile, revoke, canary, transfer: the Sign in with Apple key's ID (`kid`)",
            { text throws(SettingProblem) in
                try appleIdentifier(text, what: "key ID")
            }),
        .optional(
            .applePrivateKeyFile, shown: "(required by the Apple commands)",
            "reconcile, revoke, canary, transfer: that key's `.p8` file (PKCS#8 PEM, EC P-256)",
            { text throws(SettingProblem) in text }),
        .parsed(
            .appleTokenURL, default: defaultTokenURL,
            "reconcile, revoke, canary, transfer: Apple's token endpoint (transfer's access token too); https only (http only to loopback); naming a stand-in, set the revoke and migration URLs beside it",
            ServerConfiguration.httpsURL),
        .parsed(
            .appleRevokeURL, default: AppleTokenRevocation.defaultRevokeURL,
            "revoke and canary: Apple's token revocation endpoint; https only (http only to loopback)",
            ServerConfiguration.httpsURL),
        .parsed(
            .appleMigrationURL, default: AppleUserMigration.defaultMigrationURL,
            "transfer only: Apple's user migration endpoint; https only (http only to loopback)",
            ServerConfiguration.httpsURL),
        .optional(
            .appleCAFile, shown: "(system trust store)",
            "reconcile, revoke, canary, transfer: CA bundle for Apple's token, revocation and migration endpoints",
            { text throws(SettingProblem) in text }),
        .integer(
            .appleTimeout, default: AppleSignedPost.defaultTimeoutSeconds, in: AppleSignedPost.timeoutSecondsRange,
            "reconcile, revoke, canary, transfer: whole timeout of one request to Apple"),
        .integer(
            .appleAttempts, default: AppleSignedPost.defaultAttempts, in: AppleSignedPost.attemptsRange,
            "reconcile, revoke, canary, transfer: tries per request on 5xx or a timeout (a 429 waits its Retry-After and uses none)"
        ),
        .integer(
            .appleRetryDelay, default: AppleSignedPost.defaultRetryDelayMilliseconds,
            in: AppleSignedPost.retryDelayMillisecondsRange,
            "reconcile, revoke, canary, transfer: wait before the first retry, doubled for each next one (a 429 without Retry-After waits this long)"
        ),
    ]

    /// The rows of the table reconcile reads: its own and every one of serve's Redis settings
    /// (a Redis setting serve has and reconcile lacked would stop reconcile with a setting
    /// missing from its table).
    static var table: [Setting] {
        let sharedNames: Set<String> = [SettingKey.keyPrefix.name, SettingKey.streamMaximumLength.name]
        return ServerConfiguration.settings.filter { $0.name.hasPrefix("SIWA_REDIS_") || sharedNames.contains($0.name) }
            + appleSettings
    }

    /// `reconcile --help`'s lines: reconcile's own rows.
    public static var helpLines: [String] {
        appleSettings.map { "  \($0.name) (default: \($0.defaultValue ?? "required")): \($0.meaning)" }
    }

    public var teamID: String
    public var keyID: String
    var privateKeyFile: String
    /// The key read from `privateKeyFile` at start, so a bad file stops the run before any request.
    public var privateKey: ES256PrivateKey
    public var tokenURL: String
    /// `revoke`'s endpoint; every other Apple setting is shared with reconcile.
    public var revokeURL: String
    /// `transfer`'s user migration endpoint.
    public var migrationURL: String
    public var caFile: String?
    public var timeoutSeconds: Int
    public var attempts: Int
    public var retryDelayMilliseconds: Int
    /// serve's Redis group (Sentinel included).
    public var redis: RedisSettings
    public var keyPrefix: String
    public var streamMaximumLength: Int
    /// `SIWA_*` names that are not settings of either command: warned about at start.
    public var unknownSettings: [String]

    public init(environment: [String: String], envFile: String? = nil) throws(ConfigurationError) {
        let values = try ServerConfiguration.settingText(environment: environment, envFile: envFile)
        unknownSettings = ServerConfiguration.unknownNames(in: values)
        let parsed = try SettingValues(table: Self.table, text: values)

        guard let team: String = try parsed[.appleTeamID] else {
            throw ConfigurationError(SettingKey.appleTeamID, "is required: your Apple team ID")
        }
        teamID = team
        guard let key: String = try parsed[.appleKeyID] else {
            throw ConfigurationError(SettingKey.appleKeyID, "is required: your Apple key ID")
        }
        keyID = key
        guard let keyFile: String = try parsed[.applePrivateKeyFile] else {
            throw ConfigurationError(
                SettingKey.applePrivateKeyFile, "is required: the .p8 file of your Sign in with Apple key")
        }
        privateKeyFile = keyFile
        guard let pem = try? String(contentsOfFile: keyFile, encoding: .utf8) else {
            throw ConfigurationError(SettingKey.applePrivateKeyFile, "cannot read \(keyFile)")
        }
        do {
            privateKey = try ES256PrivateKey(pem: pem)
        } catch {
            throw ConfigurationError(SettingKey.applePrivateKeyFile, "is unusable: \(error.description)")
        }
        tokenURL = try parsed[.appleTokenURL]
        revokeURL = try parsed[.appleRevokeURL]
        migrationURL = try parsed[.appleMigrationURL]
        caFile = try parsed[.appleCAFile]
        if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw ConfigurationError(SettingKey.appleCAFile, "cannot read \(caFile)")
        }
        timeoutSeconds = try parsed[.appleTimeout]
        attempts = try parsed[.appleAttempts]
        retryDelayMilliseconds = try parsed[.appleRetryDelay]
        redis = try ServerConfiguration.redisSettings(parsed, text: values)
        keyPrefix = try parsed[.keyPrefix]
        streamMaximumLength = try parsed[.streamMaximumLength]
    }

    /// Apple's team and key IDs: 10 characters, upper-case letters and digits.
    @Sendable static func appleIdentifier(_ value: String, what: String) throws(SettingProblem) -> String {
        guard isAppleIdentifier(value) else {
            throw SettingProblem("must be 10 upper-case letters and digits, as Apple shows the \(what)")
        }
        return value
    }

    /// Whether `value` has the form of an Apple team or key ID.
    public static func isAppleIdentifier(_ value: String) -> Bool {
        value.utf8.count == 10 && value.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) })
    }
}
