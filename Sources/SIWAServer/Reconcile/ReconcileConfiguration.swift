import Foundation
import SIWACrypto

/// The settings of `siwa-endpoint reconcile`: Apple's token endpoint and the key that
/// signs the client secret, plus the Redis settings `serve` uses (same names, same
/// checks). Read from `SIWA_*` environment variables and optionally an env file; a
/// bad value stops the run with a message naming the setting.
public struct ReconcileConfiguration: Sendable {
    public static let defaultTokenURL = "https://appleid.apple.com/auth/token"

    /// The settings only reconcile reads. `serve` lists them too (so it does not warn
    /// about them as unknown), marked as reconcile's.
    public static let appleSettings: [(name: String, defaultValue: String?, meaning: String)] = [
        (
            "SIWA_APPLE_TEAM_ID", "(required by reconcile)",
            "reconcile only: your Apple team ID (the client secret's `iss`)"
        ),
        ("SIWA_APPLE_KEY_ID", "(required by reconcile)", "reconcile only: the Sign in with Apple key's ID (`kid`)"),
        (
            "SIWA_APPLE_PRIVATE_KEY_FILE", "(required by reconcile)",
            "reconcile only: that key's `.p8` file (PKCS#8 PEM, EC P-256)"
        ),
        (
            "SIWA_APPLE_TOKEN_URL", defaultTokenURL,
            "reconcile only: Apple's token endpoint; https only (http only to loopback)"
        ),
        ("SIWA_APPLE_CA_FILE", "(system trust store)", "reconcile only: CA bundle for the token endpoint"),
        ("SIWA_APPLE_TIMEOUT_SECONDS", "10", "reconcile only: whole timeout of one token request"),
        ("SIWA_APPLE_ATTEMPTS", "3", "reconcile only: tries per user on 5xx, 429 or a timeout"),
        ("SIWA_APPLE_RETRY_DELAY_MS", "2000", "reconcile only: wait before the first retry, doubled for each next one"),
    ]

    public var teamID: String
    public var keyID: String
    public var privateKeyFile: String
    /// The key read from `privateKeyFile` at start, so a bad file stops the run before any request.
    public var privateKey: ES256PrivateKey
    public var tokenURL: String
    public var caFile: String?
    public var timeoutSeconds: Int
    public var attempts: Int
    public var retryDelayMilliseconds: Int
    public var redisURL: String
    public var redisTimeoutMilliseconds: Int
    public var keyPrefix: String
    public var streamMaximumLength: Int
    /// `SIWA_*` names that are not settings of either command: warned about at start.
    public var unknownSettings: [String]

    public init(environment: [String: String], envFile: String? = nil) throws(ConfigurationError) {
        let values = try SettingReader.values(environment: environment, envFile: envFile)
        let knownNames = Set(ServerConfiguration.settings.map(\.name))
        unknownSettings = values.keys.filter { !knownNames.contains($0) }.sorted()
        let reader = SettingReader(values: values)

        teamID = try Self.appleIdentifier("SIWA_APPLE_TEAM_ID", values, what: "team ID")
        keyID = try Self.appleIdentifier("SIWA_APPLE_KEY_ID", values, what: "key ID")
        guard let keyFile = values["SIWA_APPLE_PRIVATE_KEY_FILE"], !keyFile.isEmpty else {
            throw ConfigurationError(
                setting: "SIWA_APPLE_PRIVATE_KEY_FILE", "is required: the .p8 file of your Sign in with Apple key")
        }
        privateKeyFile = keyFile
        guard let pem = try? String(contentsOfFile: keyFile, encoding: .utf8) else {
            throw ConfigurationError(setting: "SIWA_APPLE_PRIVATE_KEY_FILE", "cannot read \(keyFile)")
        }
        do {
            privateKey = try ES256PrivateKey(pem: pem)
        } catch {
            throw ConfigurationError(setting: "SIWA_APPLE_PRIVATE_KEY_FILE", "is unusable: \(error.description)")
        }
        tokenURL = try reader.httpsURL("SIWA_APPLE_TOKEN_URL", default: Self.defaultTokenURL)
        caFile = try reader.readableFile("SIWA_APPLE_CA_FILE")
        timeoutSeconds = try reader.integer("SIWA_APPLE_TIMEOUT_SECONDS", default: 10, in: 1...60)
        attempts = try reader.integer("SIWA_APPLE_ATTEMPTS", default: 3, in: 1...10)
        retryDelayMilliseconds = try reader.integer("SIWA_APPLE_RETRY_DELAY_MS", default: 2000, in: 10...60_000)

        redisURL = try reader.redisURL()
        redisTimeoutMilliseconds = try reader.integer("SIWA_REDIS_TIMEOUT_MS", default: 1000, in: 10...60_000)
        keyPrefix = try reader.keyPrefix()
        streamMaximumLength = try reader.integer("SIWA_STREAM_MAXLEN", default: 1_000_000, in: 1000...1_000_000_000)
    }

    /// Apple's team and key IDs: 10 characters, upper-case letters and digits.
    private static func appleIdentifier(_ name: String, _ values: [String: String], what: String)
        throws(ConfigurationError) -> String
    {
        guard let value = values[name] else {
            throw ConfigurationError(setting: name, "is required: your Apple \(what)")
        }
        guard value.utf8.count == 10,
            value.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) })
        else {
            throw ConfigurationError(
                setting: name, "must be 10 upper-case letters and digits, as Apple shows the \(what)")
        }
        return value
    }
}
