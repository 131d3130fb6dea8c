import SIWACrypto
import SIWAVerification

/// The provider is the server's key source: `NotificationVerifier.verify(body:keys:now:)`
/// asks it for keys by kid and, on an unknown kid, for one rate-limited refresh. The rule
/// that turns an unknown kid into 401 or 503 lives in the verifier.
extension JWKSProvider: SigningKeySource {
    public func key(forKeyID kid: String) throws(VerificationError) -> RSAPublicKey {
        try keys.key(forKeyID: kid)
    }
}

extension JWKSRefreshOutcome: KeyRefreshResult {
    /// Only a fetch that brought a usable key set.
    public var broughtKeys: Bool { self == .refreshed }
}
