import Foundation
import SIWAKeys
import SIWASettings
import SIWAVerification

/// Google's side of the responder: the verifier for its Security Event Tokens, its keys
/// (a `JWKSProvider` over `RISCDiscoveryFetcher`: the issuer travels with the keys), and
/// the per-client-ID figures of its pushes. Built by serve's assembly when
/// `SIWA_GOOGLE_CLIENT_IDS` is set; absent, the Google path is an unknown path (404).
public final class SecurityEventReceiver: Sendable {
    public let settings: GoogleSettings
    let verifier: SecurityEventVerifier
    public let keys: JWKSProvider
    /// Per Google client ID: tokens accepted, refusals by reason. No silence alert: Google
    /// pushes only when something happens to a user (its canary is `google verify`).
    public let traffic: ClientTraffic

    public init(settings: GoogleSettings, verifier: SecurityEventVerifier, keys: JWKSProvider, startedAt: Int64) {
        self.settings = settings
        self.verifier = verifier
        self.keys = keys
        self.traffic = ClientTraffic(
            silenceAlertSeconds: Dictionary(uniqueKeysWithValues: settings.clientIDs.map { ($0, 0) }),
            startedAt: startedAt)
    }

    /// The media type RFC 8935 pushes with.
    public static let mediaType = "application/secevent+jwt"

    /// Whether a request's `Content-Type` is `application/secevent+jwt` (case-insensitive,
    /// parameters ignored). A missing type is not: RFC 8935 says the transmitter sends it.
    static func isSecurityEventMediaType(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let type = contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return String(type).trimmingCharacters(in: .whitespaces).lowercased() == mediaType
    }
}
