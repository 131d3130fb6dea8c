import SIWACrypto
import SIWAJSON

/// Turns a pushed Security Event Token (RFC 8417, delivered per RFC 8935) into a
/// `VerifiedSecurityEvent`, or says exactly why not: Google's Cross-Account Protection.
///
/// Pure, like `NotificationVerifier`: bytes, keys, the issuer and a clock reading in, no
/// I/O. The steps run top to bottom: token → compact JWS → header (RS256 pinned, `typ`) →
/// key by kid → signature → claims (`iss`, `aud`, `iat`, `jti`) → events → subjects.
/// Nothing in the claims is read before the signature checks out.
///
/// What differs from Apple's notifications: the body is the token itself; the issuer comes
/// from Google's `risc-configuration` document (never written here); there is no `exp`
/// (Google's tokens "represent historical events and don't expire"), so only an `iat`
/// later than now plus the leeway is refused; the event time is `iat`.
public struct SecurityEventVerifier: Sendable {
    /// Google's discovery document: `issuer` and `jwks_uri` come from it.
    public static let googleConfigurationURL = "https://accounts.google.com/.well-known/risc-configuration"
    /// A SET is a few hundred bytes; this is the same bound as Apple's bodies.
    public static let defaultMaximumTokenBytes = 64 * 1024
    /// RFC 8417 allows several events in one token; Google sends one. More than this many is
    /// not a token anyone sends.
    public static let maximumEventCount = 16
    /// The longest `reason`, `state`, `token_type`, `token_identifier_alg` or `token` kept.
    public static let maximumMemberBytes = 256

    public let clientIDs: Set<String>
    public let leewaySeconds: Int64
    public let maximumTokenBytes: Int

    public init(
        clientIDs: Set<String>, leewaySeconds: Int64 = NotificationVerifier.defaultLeewaySeconds,
        maximumTokenBytes: Int = defaultMaximumTokenBytes
    ) {
        self.clientIDs = clientIDs
        self.leewaySeconds = leewaySeconds
        self.maximumTokenBytes = maximumTokenBytes
    }

    /// Verifies one pushed token at `now` (Unix seconds) against `issuer` (the configuration
    /// document's; nil while none has been loaded) with the keys `source` holds; when the
    /// token names a kid it does not hold, asks it for one refresh and tries once more.
    ///
    /// The unknown-kid rule is Apple's: `kid_unknown` (400 `invalid_key`) only when a fetch
    /// made for this request, or one it waited on, succeeded and still lacks the kid;
    /// otherwise `keys_unavailable` (503: Google redelivers), so made-up kids cannot turn a
    /// genuine token under a newly published key into a refusal.
    public func verify(
        token: [UInt8], keys source: some SigningKeySource, issuer: String?, now: Int64
    ) throws(VerificationError) -> VerifiedSecurityEvent {
        guard let issuer else {
            throw VerificationError(.keysUnavailable, "Google's risc-configuration document has not been loaded yet")
        }
        let refreshed: Bool
        do {
            return try verify(token: token, issuer: issuer, now: now) { kid throws(VerificationError) in
                try source.key(forKeyID: kid)
            }
        } catch  where error.code == .kidUnknown || error.code == .keysUnavailable || error.code.isAboutOurKeySet {
            refreshed = source.refreshForUnknownKey().broughtKeys
        }
        do {
            return try verify(token: token, issuer: issuer, now: now) { kid throws(VerificationError) in
                try source.key(forKeyID: kid)
            }
        } catch  where error.code == .kidUnknown && !refreshed {
            throw VerificationError(
                .keysUnavailable, "the token's kid is unknown and Google's JWKS could not be fetched again just now")
        }
    }

    /// Verifies one token with a fixed key set (tests and the `verify` command).
    public func verify(
        token: [UInt8], keys: JSONWebKeySet, issuer: String, now: Int64
    ) throws(VerificationError) -> VerifiedSecurityEvent {
        try verify(token: token, issuer: issuer, now: now) { kid throws(VerificationError) in
            try keys.key(forKeyID: kid)
        }
    }

    private func verify(
        token: [UInt8], issuer: String, now: Int64, key keyForID: (String) throws(VerificationError) -> RSAPublicKey
    ) throws(VerificationError) -> VerifiedSecurityEvent {
        guard token.count <= maximumTokenBytes else {
            throw VerificationError(
                .bodyTooLarge, "the token is \(token.count) bytes; the limit is \(maximumTokenBytes)")
        }
        let plain = token.withUnsafeBufferPointer { bytes in
            PlainToken.read(bytes, token: 0..<bytes.count, checkingSecurityEventType: true)
        }
        if let plain { return try verify(plain: plain, of: token, issuer: issuer, now: now, key: keyForID) }
        return try verifyStrictly(token: token, issuer: issuer, now: now, key: keyForID)
    }

    /// Every step by the strict parsers, as before the fast path existed: what answers every
    /// token the fast path does not read, and what the differential tests compare it with.
    package func verifyStrictly(
        token: [UInt8], keys: JSONWebKeySet, issuer: String, now: Int64
    ) throws(VerificationError) -> VerifiedSecurityEvent {
        guard token.count <= maximumTokenBytes else {
            throw VerificationError(
                .bodyTooLarge, "the token is \(token.count) bytes; the limit is \(maximumTokenBytes)")
        }
        return try verifyStrictly(token: token, issuer: issuer, now: now) { kid throws(VerificationError) in
            try keys.key(forKeyID: kid)
        }
    }

    private func verifyStrictly(
        token: [UInt8], issuer: String, now: Int64, key keyForID: (String) throws(VerificationError) -> RSAPublicKey
    ) throws(VerificationError) -> VerifiedSecurityEvent {
        let jws = try CompactJWS(token)
        let header = try JWSHeader(decoding: jws.header)
        try Self.checkType(header.type)
        let key = try keyForID(header.keyID)
        guard jws.signature.count == key.modulusBytes else {
            throw VerificationError(
                .signatureLengthMismatch,
                "the signature is \(jws.signature.count) bytes; the key's modulus is \(key.modulusBytes)")
        }
        guard key.isValidRS256Signature(jws.signature, for: jws.signingInput) else {
            throw VerificationError(.signatureInvalid, "the RS256 signature does not verify with the key named by kid")
        }
        return try interpretStrictly(claims: jws.claims, issuer: issuer, now: now)
    }

    /// `typ`: absent, `secevent+jwt` (RFC 8417; `application/` may be spelt out, and media
    /// types are case-insensitive) or `JWT`.
    static func checkType(_ type: JSONValue?) throws(VerificationError) {
        guard let type else { return }
        if case .string(let text) = type {
            let lowered = text.lowercased()
            if lowered == "secevent+jwt" || lowered == "application/secevent+jwt" || lowered == "jwt" { return }
        }
        throw VerificationError(.typNotAllowed, "the JWS header's typ is not secevent+jwt or JWT")
    }

    /// The claims of a token whose signature has checked out: the fast path when it reads
    /// them, the strict one otherwise. `package`: reachable by this package's tests and fuzz
    /// target, never by a library user.
    package func interpret(claims bytes: [UInt8], issuer: String, now: Int64) throws(VerificationError)
        -> VerifiedSecurityEvent
    {
        let plain = bytes.withUnsafeBufferPointer { claims in
            plainSecurityEvent(claims: claims, 0..<claims.count, issuer: issuer, now: now)
        }
        if let plain { return plain }
        return try interpretStrictly(claims: bytes, issuer: issuer, now: now)
    }

    /// `interpret(claims:issuer:now:)` by the strict parser alone.
    package func interpretStrictly(claims bytes: [UInt8], issuer: String, now: Int64) throws(VerificationError)
        -> VerifiedSecurityEvent
    {
        let members = try JSONDocument.claims.parseObject(bytes)

        switch members["iss"] {
        case nil: throw VerificationError(.issMissing, "the claims have no iss")
        case .string(let sent)? where sent.utf8.elementsEqual(issuer.utf8): break
        default: throw VerificationError(.issMismatch, "iss is not exactly the configuration document's issuer")
        }

        let served = try servedClientIDs(members["aud"])

        guard let iat = members["iat"] else { throw VerificationError(.iatMissing, "the claims have no iat") }
        guard let issuedAt = NotificationClaims.numericDate(iat) else {
            throw VerificationError(.iatInvalid, "iat is not a NumericDate")
        }
        guard issuedAt <= NotificationClaims.adding(now, leewaySeconds) else {
            var error = VerificationError(
                .iatInFuture, "iat \(issuedAt) is in the future (now \(now), leeway \(leewaySeconds) s)")
            error.issuedAt = issuedAt
            error.serverTime = now
            throw error
        }

        let tokenID: String
        switch members["jti"] {
        case nil: throw VerificationError(.jtiMissing, "the claims have no jti")
        case .string(let jti)?
        where !jti.isEmpty && jti.unicodeScalars.count <= NotificationClaims.maximumTokenIDLength
            && !jti.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }):
            tokenID = jti
        default: throw VerificationError(.jtiInvalid, "jti is not a string of 1 to 256 printable characters")
        }

        let events: [(String, JSONValue)]
        switch members["events"] {
        case nil: throw VerificationError(.eventsMissing, "the claims have no events")
        case .object(let object)?: events = object.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        case let other?: throw VerificationError(.eventsWrongType, "events is a JSON \(other.typeName), not an object")
        }
        guard !events.isEmpty else { throw VerificationError(.eventsEmpty, "events is an empty object") }
        guard events.count <= Self.maximumEventCount else {
            throw VerificationError(
                .eventsTooMany, "events holds \(events.count) events; at most \(Self.maximumEventCount) are read")
        }
        var parsed: [SecurityEvent] = []
        for (rawType, payload) in events { parsed.append(try Self.event(rawType: rawType, payload: payload)) }
        return VerifiedSecurityEvent(clientIDs: served, tokenID: tokenID, issuedAt: issuedAt, events: parsed)
    }

    /// The configured client IDs `aud` names (a string or a non-empty array of strings),
    /// matched byte for byte; the ones kept are the configured spellings.
    private func servedClientIDs(_ aud: JSONValue?) throws(VerificationError) -> [String] {
        let audiences: [String]
        switch aud {
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
        var served: [String] = []
        for audience in audiences {
            guard let configured = clientIDs.first(where: { $0.utf8.elementsEqual(audience.utf8) }),
                !served.contains(configured)
            else { continue }
            served.append(configured)
        }
        guard !served.isEmpty else {
            throw VerificationError(.audNotServed, "aud names no Google client ID this deployment serves")
        }
        return served
    }

    /// One event: its type from the URI, then what that type needs from its payload.
    static func event(rawType: String, payload: JSONValue) throws(VerificationError) -> SecurityEvent {
        guard !rawType.isEmpty, rawType.utf8.count <= maximumMemberBytes, isPrintable(rawType) else {
            throw VerificationError(.eventTypeInvalid, "an event type is not a printable URI of 1 to 256 bytes")
        }
        guard case .object(let members) = payload else {
            throw VerificationError(.eventPayloadNotObject, "an event's payload is a JSON \(payload.typeName)")
        }
        let type = SecurityEventType(rawType: rawType)
        switch type {
        case .verification:
            return SecurityEvent(
                type: type, rawType: rawType, subject: nil, state: try shortString(members["state"], "state"))
        case .tokenRevoked:
            return SecurityEvent(
                type: type, rawType: rawType, subject: nil, revokedToken: try revokedToken(members["subject"]))
        case .unknown:
            // Kept as it came: an account subject when one can be read, nothing otherwise.
            return SecurityEvent(type: type, rawType: rawType, subject: try? accountSubject(members["subject"]))
        case .accountDisabled:
            return SecurityEvent(
                type: type, rawType: rawType, subject: try accountSubject(members["subject"]),
                reason: try shortString(members["reason"], "reason"))
        case .sessionsRevoked, .tokensRevoked, .accountEnabled, .accountCredentialChangeRequired:
            return SecurityEvent(type: type, rawType: rawType, subject: try accountSubject(members["subject"]))
        }
    }

    /// The subject's format: `subject_type` (Google's spelling) or `format` (RISC 1.0's),
    /// which must agree when both are sent.
    static func subjectFormat(_ members: [String: JSONValue]) throws(VerificationError) -> String {
        var format: String?
        for name in ["subject_type", "format"] {
            switch members[name] {
            case nil: continue
            case .string(let text)?:
                if let format, !format.utf8.elementsEqual(text.utf8) {
                    throw VerificationError(.subjectFormatNotAccepted, "the subject's subject_type and format disagree")
                }
                format = text
            case .some: throw VerificationError(.subjectInvalid, "the subject's \(name) is not a string")
            }
        }
        guard let format else { throw VerificationError(.subjectInvalid, "the subject has no subject_type or format") }
        return format
    }

    /// The Google account ID of an `iss-sub` or `id_token_claims` subject. An `email` the
    /// subject may carry is never read.
    static func accountSubject(_ value: JSONValue?) throws(VerificationError) -> String {
        guard let value else { throw VerificationError(.subjectMissing, "the event has no subject") }
        guard case .object(let members) = value else {
            throw VerificationError(.subjectInvalid, "the subject is a JSON \(value.typeName), not an object")
        }
        let format = try subjectFormat(members)
        guard format == "iss-sub" || format == "id_token_claims" else {
            throw VerificationError(
                .subjectFormatNotAccepted, "the subject is not iss-sub or id_token_claims, as this event needs")
        }
        guard case .string(let subjectIssuer)? = members["iss"], !subjectIssuer.isEmpty else {
            throw VerificationError(.subjectInvalid, "the subject has no iss string")
        }
        guard case .string(let sub)? = members["sub"], UserKeyPart.isValidSubject(sub) else {
            throw VerificationError(.subjectInvalid, "the subject's sub is not 1 to 255 visible ASCII characters")
        }
        return sub
    }

    /// `token-revoked`'s `oauth_token` subject: `token_type`, `token_identifier_alg`, `token`.
    static func revokedToken(_ value: JSONValue?) throws(VerificationError) -> RevokedToken {
        guard let value else { throw VerificationError(.subjectMissing, "the event has no subject") }
        guard case .object(let members) = value else {
            throw VerificationError(.subjectInvalid, "the subject is a JSON \(value.typeName), not an object")
        }
        guard try subjectFormat(members) == "oauth_token" else {
            throw VerificationError(.subjectFormatNotAccepted, "token-revoked needs an oauth_token subject")
        }
        var fields: [String] = []
        for name in ["token_type", "token_identifier_alg", "token"] {
            guard case .string(let text)? = members[name], !text.isEmpty, text.utf8.count <= maximumMemberBytes,
                text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
            else {
                throw VerificationError(
                    .subjectInvalid, "the subject's \(name) is not 1 to 256 visible ASCII characters")
            }
            fields.append(text)
        }
        return RevokedToken(tokenType: fields[0], identifierAlgorithm: fields[1], identifier: fields[2])
    }

    /// An optional member that, when sent, is a printable string of at most 256 bytes.
    static func shortString(_ value: JSONValue?, _ name: String) throws(VerificationError) -> String? {
        guard let value else { return nil }
        guard case .string(let text) = value, !text.isEmpty, text.utf8.count <= maximumMemberBytes, isPrintable(text)
        else {
            throw VerificationError(
                .eventMemberInvalid, "the event's \(name) is not a printable string of 1 to 256 bytes")
        }
        return text
    }

    private static func isPrintable(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
    }
}
