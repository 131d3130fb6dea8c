import SIWAVerification

extension JWKSProvider {
    /// Verifies `body` with the current keys; when the token names a kid we do not
    /// hold, asks for one (rate-limited, shared) refresh and tries once more.
    ///
    /// A kid still unknown after that is `kid_unknown` (401) when the JWKS was
    /// fetched successfully, and `keys_unavailable` (503, Apple retries) when it could
    /// not be: then the key may well exist and we simply cannot see it.
    public func verify(
        body: [UInt8], with verifier: NotificationVerifier, now: Int64
    ) throws(VerificationError) -> VerifiedNotification {
        var verifier = verifier
        verifier.keys = keys
        do {
            return try verifier.verify(body: body, now: now)
        } catch  where error.code == .kidUnknown || error.code == .keysUnavailable {
            refreshForUnknownKeyID(now: now)
        }
        verifier.keys = keys
        do {
            return try verifier.verify(body: body, now: now)
        } catch  where error.code == .kidUnknown && !lastRefreshSucceeded {
            throw VerificationError(.keysUnavailable, "the token's kid is unknown and the JWKS could not be fetched")
        }
    }
}
