import SIWACrypto

/// Turns a request body into a `VerifiedNotification`, or says exactly why not.
///
/// Pure: it takes bytes, keys and a clock reading, and does no I/O. The steps run
/// top to bottom: body → payload → compact JWS → header (alg pinned) → key by kid →
/// signature → claims → events. Nothing in the claims is read before the signature
/// checks out.
public struct NotificationVerifier: Sendable {
    public static let appleIssuer = "https://appleid.apple.com"
    public static let defaultMaximumBodyBytes = 64 * 1024
    public static let defaultLeewaySeconds: Int64 = 60

    public var keys: JSONWebKeySet
    public let clientIDs: Set<String>
    public let leewaySeconds: Int64
    public let maximumBodyBytes: Int

    public init(
        keys: JSONWebKeySet, clientIDs: Set<String>, leewaySeconds: Int64 = defaultLeewaySeconds,
        maximumBodyBytes: Int = defaultMaximumBodyBytes
    ) {
        self.keys = keys
        self.clientIDs = clientIDs
        self.leewaySeconds = leewaySeconds
        self.maximumBodyBytes = maximumBodyBytes
    }

    /// Verifies one request body at `now` (Unix seconds).
    public func verify(body: [UInt8], now: Int64) throws(VerificationError) -> VerifiedNotification {
        let token = try NotificationBody.payload(of: body, maximumBytes: maximumBodyBytes)
        let jws = try CompactJWS(token)
        let header = try JWSHeader(decoding: jws.header)
        let key = try keys.key(forKeyID: header.keyID)
        guard jws.signature.count == key.modulusBytes else {
            throw VerificationError(
                .signatureLengthMismatch,
                "the signature is \(jws.signature.count) bytes; the key's modulus is \(key.modulusBytes)")
        }
        guard key.isValidRS256Signature(jws.signature, for: jws.signingInput) else {
            throw VerificationError(.signatureInvalid, "the RS256 signature does not verify with the key named by kid")
        }
        return try interpret(claims: jws.claims, now: now)
    }

    /// The claims of a token whose signature has checked out, turned into a notification.
    /// `package`: reachable by this package's fuzz target, never by a library user, since
    /// it reads claims that nothing has authenticated.
    package func interpret(claims bytes: [UInt8], now: Int64) throws(VerificationError) -> VerifiedNotification {
        let claims = try NotificationClaims(decoding: bytes, clientIDs: clientIDs)
        try claims.checkTimes(now: now, leewaySeconds: leewaySeconds)
        let event = try NotificationEventClaim(claims.events)
        let latest = claims.issuedAt.addingReportingOverflow(leewaySeconds).partialValue
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
