import SIWAVerification

extension JWKSProvider {
    /// Verifies `body` with the current keys; when the token names a kid we do not
    /// hold, asks for one (rate-limited, shared) refresh and tries once more.
    ///
    /// A kid is called unknown (`kid_unknown`, 401: Apple gives up) only when a fetch made
    /// for this request, or one it waited on, succeeded and still lacks the kid. When no
    /// fetch could be made (rate limit) or the fetch failed, the key may exist and we
    /// simply have not seen it: `keys_unavailable`, 503, and Apple retries. Otherwise
    /// anyone posting made-up kids could keep the rate limit busy and make a genuine
    /// notification under a newly published key be refused for good.
    public func verify(
        body: [UInt8], with verifier: NotificationVerifier, now: Int64
    ) throws(VerificationError) -> VerifiedNotification {
        var verifier = verifier
        verifier.keys = keys
        let outcome: JWKSRefreshOutcome
        do {
            return try verifier.verify(body: body, now: now)
        } catch  where error.code == .kidUnknown || error.code == .keysUnavailable {
            outcome = refreshForUnknownKeyID(now: now)
        }
        verifier.keys = keys
        do {
            return try verifier.verify(body: body, now: now)
        } catch  where error.code == .kidUnknown && outcome != .refreshed {
            throw VerificationError(
                .keysUnavailable, "the token's kid is unknown and Apple's JWKS could not be fetched again just now")
        }
    }
}
