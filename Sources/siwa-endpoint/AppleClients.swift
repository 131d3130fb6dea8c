import SIWAAppleAPI
import SIWAHTTPS
import SIWASettings
import SIWATelemetry

extension AppleAPIConfiguration {
    /// The client every command that calls Apple's token endpoints uses (reconcile, revoke,
    /// canary, transfer): the team's client secret, the CA file and timeout, the retries, and
    /// a pacer of `rate` requests a second before every request.
    public func appleClient(rate: Double) -> AppleSignedPost {
        AppleSignedPost(
            tokenURL: tokenURL,
            secret: AppleClientSecret(teamID: teamID, keyID: keyID, key: privateKey),
            fetcher: HTTPSFetcher(caFilePath: caFile, timeoutSeconds: Double(timeoutSeconds)),
            attempts: attempts, retryDelayMilliseconds: retryDelayMilliseconds,
            pacer: Self.pacer(rate: rate))
    }

    /// Apple's `/auth/revoke` with the configured client secret, paced to `rate` per second
    /// (`revoke` and `canary` alike).
    public func revocation(rate: Double) -> AppleTokenRevocation {
        AppleTokenRevocation(revokeURL: revokeURL, client: appleClient(rate: rate))
    }

    /// What the runs read of these settings.
    var runSettings: AppleRunSettings {
        AppleRunSettings(
            teamID: teamID, tokenURL: tokenURL, revokeURL: revokeURL, migrationURL: migrationURL, keyPrefix: keyPrefix,
            streamMaximumLength: streamMaximumLength)
    }

    /// The pacer of `rate` requests a second; each wait Apple asks for with a `429` is one
    /// `apple_asked_to_wait` line, so a long pause is never silent.
    static func pacer(rate: Double) -> RequestPacer {
        RequestPacer(interval: .seconds(1 / rate)) { hold in
            EventLog.event("apple_asked_to_wait", level: "warning", [("wait_ms", .integer(hold.wholeMilliseconds))])
        }
    }
}
