import SIWACrypto
import SIWAVerification

/// The provider is the server's key source: `NotificationVerifier.verify(body:keys:now:)`
/// asks it for keys by kid and, on an unknown kid, for one rate-limited refresh. The rule
/// that turns an unknown kid into 401 or 503 lives in the verifier.
extension JWKSProvider: SigningKeySource {
    public func key(forKeyID kid: String) throws(VerificationError) -> RSAPublicKey {
        try keys.key(forKeyID: kid)
    }

    /// One rate-limited, shared refresh (`refreshForUnknownKeyID`); true when it brought keys.
    public func refreshForUnknownKey() -> Bool {
        refreshForUnknownKeyID() == .refreshed
    }

    /// Verifies `body` with `verifier`'s settings and this provider's keys (see
    /// `NotificationVerifier.verify(body:keys:now:)`).
    public func verify(
        body: [UInt8], with verifier: NotificationVerifier, now: Int64
    ) throws(VerificationError) -> VerifiedNotification {
        try verifier.verify(body: body, keys: self, now: now)
    }
}
