import SIWACrypto

/// Turns a request body into a `VerifiedNotification`, or says exactly why not.
///
/// Pure: it takes bytes, keys and a clock reading, and does no I/O of its own. The steps run
/// top to bottom: body → payload → compact JWS → header (alg pinned) → key by kid →
/// signature → claims → events. Nothing in the claims is read before the signature
/// checks out.
///
/// The keys come either fixed (`keys`, for `verify(body:now:)`: a kid the set lacks is
/// `kid_unknown`) or from a `SigningKeySource` that can be refreshed
/// (`verify(body:keys:now:)`, which owns the unknown-kid rule).
public struct NotificationVerifier: Sendable {
    public static let appleIssuer = "https://appleid.apple.com"
    public static let defaultMaximumBodyBytes = 64 * 1024
    public static let defaultLeewaySeconds: Int64 = 60
    /// The leeways the settings accept: none to ten minutes.
    public static let leewaySecondsRange: ClosedRange<Int64> = 0...600

    /// The fixed key set `verify(body:now:)` uses; empty when the keys come from a source.
    public let keys: JSONWebKeySet
    public let clientIDs: Set<String>
    public let leewaySeconds: Int64
    public let maximumBodyBytes: Int

    public init(
        keys: JSONWebKeySet = JSONWebKeySet(), clientIDs: Set<String>, leewaySeconds: Int64 = defaultLeewaySeconds,
        maximumBodyBytes: Int = defaultMaximumBodyBytes
    ) {
        self.keys = keys
        self.clientIDs = clientIDs
        self.leewaySeconds = leewaySeconds
        self.maximumBodyBytes = maximumBodyBytes
    }

    /// Verifies one request body at `now` (Unix seconds) with the fixed key set `keys`.
    public func verify(body: [UInt8], now: Int64) throws(VerificationError) -> VerifiedNotification {
        // The key set alone captured, not the whole verifier.
        let keys = self.keys
        return try verify(body: body, now: now) { kid throws(VerificationError) in try keys.key(forKeyID: kid) }
    }

    /// Verifies one request body at `now` (Unix seconds) with the keys `source` holds; when
    /// the token names a kid it does not hold, asks it for one refresh and tries once more.
    ///
    /// A kid is called unknown (`kid_unknown`, 401: Apple gives up) only when a fetch made
    /// for this request, or one it waited on, succeeded and still lacks the kid. When no
    /// fetch could be made (rate limit) or the fetch failed, the key may exist and we
    /// simply have not seen it: `keys_unavailable`, 503, and Apple retries. Otherwise
    /// anyone posting made-up kids could keep the rate limit busy and make a genuine
    /// notification under a newly published key be refused for good.
    public func verify(
        body: [UInt8], keys source: some SigningKeySource, now: Int64
    ) throws(VerificationError) -> VerifiedNotification {
        let refreshed: Bool
        do {
            return try verify(body: body, now: now) { kid throws(VerificationError) in
                try source.key(forKeyID: kid)
            }
        } catch  where error.code == .kidUnknown || error.code == .keysUnavailable || error.code.isAboutOurKeySet {
            // An unusable entry under the kid is a question about our key set too: a fetch
            // may bring the entry fixed. If it does not, its own code answers (503).
            refreshed = source.refreshForUnknownKey().broughtKeys
        }
        do {
            return try verify(body: body, now: now) { kid throws(VerificationError) in
                try source.key(forKeyID: kid)
            }
        } catch  where error.code == .kidUnknown && !refreshed {
            throw VerificationError(
                .keysUnavailable, "the token's kid is unknown and Apple's JWKS could not be fetched again just now")
        }
    }

    /// The steps, with `key` naming the key for a kid: the fast path when it reads the
    /// body, token and header (see `PlainToken`), the strict steps otherwise. Either way the
    /// same kid is looked up and the same signature checked.
    private func verify(
        body: [UInt8], now: Int64, key keyForID: (String) throws(VerificationError) -> RSAPublicKey
    ) throws(VerificationError) -> VerifiedNotification {
        if let token = plainToken(of: body) {
            return try verify(plain: token, of: body, now: now, key: keyForID)
        }
        return try verifyStrictly(body: body, now: now, key: keyForID)
    }

    /// Every step by the strict parsers, as before the fast path existed: what answers every
    /// body the fast path does not read, and what the differential tests compare it with.
    package func verifyStrictly(body: [UInt8], now: Int64) throws(VerificationError) -> VerifiedNotification {
        try verifyStrictly(body: body, now: now) { kid throws(VerificationError) in try keys.key(forKeyID: kid) }
    }

    private func verifyStrictly(
        body: [UInt8], now: Int64, key keyForID: (String) throws(VerificationError) -> RSAPublicKey
    ) throws(VerificationError) -> VerifiedNotification {
        let token = try NotificationBody.payload(of: body, maximumBytes: maximumBodyBytes)
        let jws = try CompactJWS(token)
        let header = try JWSHeader(decoding: jws.header)
        let key = try keyForID(header.keyID)
        guard jws.signature.count == key.modulusBytes else {
            throw VerificationError(
                .signatureLengthMismatch,
                "the signature is \(jws.signature.count) bytes; the key's modulus is \(key.modulusBytes)")
        }
        guard key.isValidRS256Signature(jws.signature, for: jws.signingInput) else {
            throw VerificationError(.signatureInvalid, "the RS256 signature does not verify with the key named by kid")
        }
        return try interpretStrictly(claims: jws.claims, now: now)
    }

    /// The claims of a token whose signature has checked out, turned into a notification:
    /// the fast path when it reads them, the strict one otherwise.
    /// `package`: reachable by this package's fuzz target, never by a library user, since
    /// it reads claims that nothing has authenticated.
    package func interpret(claims bytes: [UInt8], now: Int64) throws(VerificationError) -> VerifiedNotification {
        if let notification = bytes.withUnsafeBufferPointer({ plainNotification(claims: $0, 0..<$0.count, now: now) }) {
            return notification
        }
        return try interpretStrictly(claims: bytes, now: now)
    }

    /// `interpret(claims:now:)` by the strict parser alone.
    package func interpretStrictly(claims bytes: [UInt8], now: Int64) throws(VerificationError)
        -> VerifiedNotification
    {
        let claims = try NotificationClaims(decoding: bytes, clientIDs: clientIDs)
        try claims.checkTimes(now: now, leewaySeconds: leewaySeconds)
        let event = try NotificationEventClaim(claims.events)
        let latest = NotificationClaims.adding(claims.issuedAt, leewaySeconds)
        guard event.eventTimeMilliseconds / 1000 <= latest else {
            throw VerificationError(
                .eventTimeInFuture,
                "event_time \(event.eventTimeMilliseconds) ms is after iat \(claims.issuedAt) plus the leeway of \(leewaySeconds) s"
            )
        }
        return VerifiedNotification(
            clientID: claims.clientID, subject: event.subject, type: event.type, rawType: event.rawType,
            eventTimeMilliseconds: event.eventTimeMilliseconds, tokenID: claims.tokenID, issuedAt: claims.issuedAt,
            expiresAt: claims.expiresAt, email: event.email, isPrivateEmail: event.isPrivateEmail)
    }
}
