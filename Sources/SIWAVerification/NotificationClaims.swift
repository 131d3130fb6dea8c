import SIWAJSON

/// The JWT claims of a notification, checked against this deployment.
struct NotificationClaims {
    static let maximumTokenIDLength = 256

    let clientID: String
    let issuedAt: Int64
    let expiresAt: Int64?
    let notBefore: Int64?
    let tokenID: String
    let events: JSONValue

    init(decoding bytes: [UInt8], clientIDs: Set<String>) throws(VerificationError) {
        let members = try JSONDocument.claims.parseObject(bytes)

        switch members["iss"] {
        case nil: throw VerificationError(.issMissing, "the claims have no iss")
        case .string(let issuer)? where issuer.hasSameUTF8(as: NotificationVerifier.appleIssuer): break
        default: throw VerificationError(.issMismatch, "iss is not exactly \(NotificationVerifier.appleIssuer)")
        }

        let audiences: [String]
        switch members["aud"] {
        case nil: throw VerificationError(.audMissing, "the claims have no aud")
        case .string(let audience)?: audiences = [audience]
        case .array(let elements)? where !elements.isEmpty:
            var strings: [String] = []
            for element in elements {
                guard case .string(let audience) = element else {
                    throw VerificationError(.audInvalid, "aud is an array holding a JSON \(element.typeName)")
                }
                strings.append(audience)
            }
            audiences = strings
        case let other?:
            throw VerificationError(.audInvalid, "aud is a JSON \(other.typeName), not a string or array of strings")
        }
        // Byte for byte: String equality would take a canonically equivalent spelling (a
        // Kelvin sign for a K) as the client ID, and that spelling would end up in Redis keys.
        // The client ID kept is the configured one.
        let served = audiences.lazy.compactMap { audience in
            clientIDs.first { $0.hasSameUTF8(as: audience) }
        }.first
        guard let served else {
            throw VerificationError(.audNotServed, "aud names no client ID this deployment serves")
        }
        clientID = served

        switch members["exp"] {
        case nil: expiresAt = nil
        case let value?:
            guard let seconds = Self.numericDate(value) else {
                throw VerificationError(.expInvalid, "exp is not a NumericDate")
            }
            expiresAt = seconds
        }

        switch members["nbf"] {
        case nil: notBefore = nil
        case let value?:
            guard let seconds = Self.numericDate(value) else {
                throw VerificationError(.nbfInvalid, "nbf is not a NumericDate")
            }
            notBefore = seconds
        }

        guard let iat = members["iat"] else { throw VerificationError(.iatMissing, "the claims have no iat") }
        guard let issued = Self.numericDate(iat) else {
            throw VerificationError(.iatInvalid, "iat is not a NumericDate")
        }
        issuedAt = issued

        switch members["jti"] {
        case nil: throw VerificationError(.jtiMissing, "the claims have no jti")
        case .string(let jti)?
        where !jti.isEmpty && jti.unicodeScalars.count <= Self.maximumTokenIDLength
            && !jti.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }):
            tokenID = jti
        default: throw VerificationError(.jtiInvalid, "jti is not a string of 1 to 256 printable characters")
        }

        guard let events = members["events"] else {
            throw VerificationError(.eventsMissing, "the claims have no events")
        }
        self.events = events
    }

    /// The lifetime Apple's real tokens carry (`exp = iat + 86400`); a token without `exp`
    /// (Apple's documented shape) gets it too, so a captured token cannot be replayed for ever.
    static let lifetimeWithoutExpirySeconds: Int64 = 86_400

    /// The longest lifetime accepted: `exp` may be at most this long after `iat`. Apple's
    /// is exactly one day; a longer one would outlive the `jti` marker that stops a replay.
    static let maximumLifetimeSeconds: Int64 = 86_400

    /// The token's times against `now`, each with the leeway; the sums saturate, so a time
    /// near `Int64.max` can never wrap round to the past.
    func checkTimes(now: Int64, leewaySeconds: Int64) throws(VerificationError) {
        try Self.checkTimes(
            issuedAt: issuedAt, expiresAt: expiresAt, notBefore: notBefore, now: now, leewaySeconds: leewaySeconds)
    }

    /// `checkTimes(now:leewaySeconds:)` on the times alone (the fast path has no claims value).
    static func checkTimes(
        issuedAt: Int64, expiresAt: Int64?, notBefore: Int64?, now: Int64, leewaySeconds: Int64
    ) throws(VerificationError) {
        let latestExpiry = Self.adding(issuedAt, Self.maximumLifetimeSeconds)
        if let expiresAt, expiresAt > latestExpiry {
            throw VerificationError(
                .expBeyondLifetime,
                "exp \(expiresAt) is more than \(Self.maximumLifetimeSeconds) s after iat \(issuedAt)")
        }
        let expiry = expiresAt ?? Self.adding(issuedAt, Self.lifetimeWithoutExpirySeconds)
        if now >= Self.adding(expiry, leewaySeconds) {
            throw VerificationError(
                .tokenExpired,
                expiresAt == nil
                    ? "the token has no exp and was issued more than a day ago (now \(now), leeway \(leewaySeconds) s)"
                    : "the token expired at \(expiry) (now \(now), leeway \(leewaySeconds) s)")
        }
        guard issuedAt <= Self.adding(now, leewaySeconds) else {
            var error = VerificationError(
                .iatInFuture, "iat \(issuedAt) is in the future (now \(now), leeway \(leewaySeconds) s)")
            error.issuedAt = issuedAt
            error.serverTime = now
            throw error
        }
        if let notBefore, notBefore > Self.adding(now, leewaySeconds) {
            throw VerificationError(
                .tokenNotYetValid, "nbf \(notBefore) is in the future (now \(now), leeway \(leewaySeconds) s)")
        }
    }

    /// `time + seconds`, held at `Int64.max` (or `.min`) instead of wrapping.
    static func adding(_ time: Int64, _ seconds: Int64) -> Int64 {
        let (sum, overflow) = time.addingReportingOverflow(seconds)
        guard overflow else { return sum }
        return seconds > 0 ? .max : .min
    }

    /// RFC 7519 NumericDate: non-negative seconds, fractions truncated.
    static func numericDate(_ value: JSONValue) -> Int64? {
        switch value {
        case .integer(let seconds) where seconds >= 0: seconds
        case .number(let seconds) where seconds >= 0 && seconds < 1e15: Int64(seconds)
        default: nil
        }
    }
}
