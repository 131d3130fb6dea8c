import Foundation
import SIWAFastCGI
import SIWAHTTPS
import SIWAKeys
import SIWARedis
import SIWASettingKeys
import SIWASpool
import SIWAStore
import SIWAVerification

// The typed groups: the parsed settings handed out, one group per part of the program.

/// Apple's keys: the provider's own settings (where from, how often, the cache file, how
/// many requests wait for an unknown kid's fetch), and how its fetcher reaches the host.
public struct JWKSSettings: Sendable, Equatable {
    /// Given to the provider as they are (its URL checked with libcurl's URL parser, the one
    /// the fetch uses).
    public var provider: JWKSProvider.Settings
    /// A CA bundle for the JWKS fetch (tests and private mirrors); nil means the system store.
    public var caFile: String?
    /// The whole fetch's timeout.
    public var timeout: Duration

    /// The fetcher these settings describe.
    public var fetcher: HTTPSFetcher {
        HTTPSFetcher(caFilePath: caFile, timeoutSeconds: Double(timeout.wholeSeconds))
    }
}

/// Google's Cross-Account Protection (RISC): its client IDs, its path, and where its keys
/// and issuer come from (`SIWA_GOOGLE_*`; the refresh intervals and the fetch's CA file and
/// timeout are the `SIWA_JWKS_*` ones Apple's keys use).
public struct GoogleSettings: Sendable, Equatable {
    public static let defaultPath = "/google/risc"
    /// Empty: Google is not served, and its path answers 404 like any unknown path.
    public var clientIDs: Set<String>
    public var path: String
    /// The provider's settings: `url` is the `risc-configuration` document's.
    public var keys: JWKSProvider.Settings

    public var isServed: Bool { !clientIDs.isEmpty }

    /// Google's keys and issuer are kept beside Apple's cache file, as `google-risc.json` in
    /// the same directory.
    public static func cacheFilePath(besideApplesAt applePath: String) -> String {
        let directory = applePath.split(separator: "/", omittingEmptySubsequences: false).dropLast()
            .joined(separator: "/")
        return (directory.isEmpty ? "" : directory) + "/google-risc.json"
    }
}

/// Where Redis is and how long a call may take.
public struct RedisSettings: Sendable, Equatable {
    /// The setting's text (it may hold a password: log `endpoint.description` instead).
    public var url: String
    public var endpoint: RedisEndpoint
    /// Connect and command timeout.
    public var timeout: Duration
    /// How the data node is found: one Redis at `endpoint`, Sentinel (then `endpoint` gives
    /// only the database, user, password and TLS) or Cluster (then only the user, password
    /// and TLS).
    public var topology: RedisTopology
    /// Replicas that must acknowledge a write (`WAIT`); fewer, and a copy is spooled.
    public var minimumReplicas: Int
    public var replicaTimeout: Duration
    /// After a call could not reach Redis, requests spool without calling it, and one probe
    /// tries Redis this often until it answers (`SIWA_REDIS_RETRY_MS`).
    public var circuitRetryInterval: Duration = RedisCircuitBreaker.defaultRetryInterval
}

/// Where the responder listens, with how many workers: the FastCGI server's own
/// configuration (its defaults and bounds are the table's), and the socket as written.
public struct FastCGISettings: Sendable, Equatable {
    /// The setting's text, as logged at start.
    public var socket: String
    /// The address (with the socket's mode and group), the workers, the body limit (the one
    /// place it is enforced), the backlog and the shutdown timeout.
    public var server: FastCGIServerConfiguration
}

/// How notifications are written into Redis.
public struct StoreSettings: Sendable, Equatable {
    public var keyPrefix: String
    public var seenMarkerTTL: Duration
    public var streamMaximumLength: Int
}

/// Where verified notifications wait while Redis cannot take them.
public struct SpoolSettings: Sendable, Equatable {
    public var directory: String
    /// Days set-aside and torn spool files are kept before they are deleted.
    public var retentionDays: Int
    /// Where records that can never be applied are set aside.
    var rejectedDirectory: String { directory + "/rejected" }
}

/// What a request may be and how it is answered.
public struct RequestSettings: Sendable, Equatable {
    public var notificationPath: String
    /// Clock leeway for `exp` and `iat`.
    public var leeway: Duration
    /// The `Retry-After` of a 503.
    public var retryAfter: Duration

    /// Half a minute: Apple retries anyway; this asks it (and a load balancer) to wait a little.
    public static let defaultRetryAfter: Duration = .seconds(30)
    /// The `Retry-After` times the settings accept: a second to an hour.
    public static let retryAfterRange: ClosedRange<Duration> = .seconds(1) ... .seconds(3600)
    /// The refusals' label for an `aud` that is not one of ours (so no client ID may be it).
    public static let unlistedClientLabel = "unlisted"
    /// The refusals' label for an `aud` that could not be read (so no client ID may be it).
    public static let noneClientLabel = "none"
}

/// The silence alert's threshold per client ID: `SIWA_SILENCE_ALERT_HOURS`, overridden per
/// client ID by `SIWA_SILENCE_ALERT_HOURS_BY_CLIENT`.
public struct SilenceSettings: Sendable, Equatable {
    /// A week: a small app may see no consent revocation for days; a week of nothing is
    /// worth a look at the registration (docs/operations.md says how to choose).
    static let defaultAlertHours = 168
    static let alertHoursRange = 0...8760
    var defaultHours: Int
    var hoursByClient: [String: Int]

    /// Seconds per client ID (0: no silence alert).
    public func alertSeconds(clientIDs: Set<String>) -> [String: Int] {
        Dictionary(uniqueKeysWithValues: clientIDs.map { ($0, (hoursByClient[$0] ?? defaultHours) * 3600) })
    }
}
