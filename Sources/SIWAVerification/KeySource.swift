import SIWACrypto

/// Where a verifier finds Apple's signing keys when they can change while it runs (a
/// cache of Apple's JWKS, kept fresh by its owner).
///
/// `NotificationVerifier.verify(body:keys:now:)` asks for the key a token's `kid` names;
/// when the source does not hold it, the verifier asks once for fresh keys and tries again.
public protocol SigningKeySource: Sendable {
    /// What the source's refresh reports (the verifier asks only `broughtKeys`).
    associatedtype RefreshResult: KeyRefreshResult

    /// The key named `kid`: `keys_unavailable` when no key is held at all, `kid_unknown`
    /// when none has that kid.
    func key(forKeyID kid: String) throws(VerificationError) -> RSAPublicKey

    /// Asks for fresh keys because a token named a kid the source does not hold. Its
    /// `broughtKeys` is true only when a fetch made for this request, or one it waited on, brought a usable
    /// key set; false when none could be made just now (rate limit) or it failed. The
    /// source keeps its own (monotonic) time for the rate limit: the token's time is not it.
    func refreshForUnknownKey() -> RefreshResult
}

/// What a refresh for an unknown kid brought, as far as the verifier's rule needs.
public protocol KeyRefreshResult {
    /// True when the refresh brought a usable key set.
    var broughtKeys: Bool { get }
}

extension Bool: KeyRefreshResult {
    /// A source that answers only yes or no.
    public var broughtKeys: Bool { self }
}
