import SIWACrypto

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The fast path of Google's Security Event Tokens, as Apple's (see
/// `NotificationVerifier+FastPath`): the token, header, claims, events and subjects read
/// where they lie, a `String` only for what leaves the verifier; any step it does not read
/// whole, or any check that fails, is answered by the strict steps on the same bytes. It
/// reads the events that name an account (`sessions-revoked`, `tokens-revoked`,
/// `account-disabled`, `account-enabled`, `account-credential-change-required`) and
/// `verification`; `token-revoked` and unknown types take the strict path.
extension SecurityEventVerifier {
    /// Whether the fast path reads `token` whole (header and claims), checks aside from the
    /// signature passing at `now`: for the tests that keep Google's tokens on it.
    package func fastPathReads(token: [UInt8], issuer: String, now: Int64) -> Bool {
        guard token.count <= maximumTokenBytes,
            let plain = token.withUnsafeBufferPointer({
                PlainToken.read($0, token: 0..<$0.count, checkingSecurityEventType: true)
            })
        else { return false }
        return plain.decoded.withUnsafeBufferPointer {
            plainSecurityEvent(claims: $0, plain.claims, issuer: issuer, now: now) != nil
        }
    }

    /// The steps after the fast path read `token`: the key, the signature, then the claims
    /// (fast, or strict when the fast path does not read them).
    func verify(
        plain token: PlainToken, of bytes: [UInt8], issuer: String, now: Int64,
        key keyForID: (String) throws(VerificationError) -> RSAPublicKey
    ) throws(VerificationError) -> VerifiedSecurityEvent {
        try token.checkSignature(in: bytes, key: keyForID)
        let event = token.decoded.withUnsafeBufferPointer { decoded in
            plainSecurityEvent(claims: decoded, token.claims, issuer: issuer, now: now)
        }
        if let event { return event }
        return try interpretStrictly(claims: Array(token.decoded[token.claims]), issuer: issuer, now: now)
    }

    /// The verified token the claims in `range` of `bytes` make, when the fast path reads
    /// them and every check passes; nil otherwise (the strict steps then say why).
    func plainSecurityEvent(
        claims bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, issuer: String, now: Int64
    ) -> VerifiedSecurityEvent? {
        PlainJSONReader.withObject(bytes, in: range) { members -> VerifiedSecurityEvent? in
            var sentIssuer, audience, issuedAt, tokenID, events: PlainJSONMember?
            for member in members {
                let name = member.nameStart..<member.nameEnd
                if bytes.bytes(name, equal: "iss") {
                    sentIssuer = member
                } else if bytes.bytes(name, equal: "aud") {
                    audience = member
                } else if bytes.bytes(name, equal: "iat") {
                    issuedAt = member
                } else if bytes.bytes(name, equal: "jti") {
                    tokenID = member
                } else if bytes.bytes(name, equal: "events") {
                    events = member
                }
            }
            guard let sentIssuer, sentIssuer.kind == .string,
                bytes.bytes(sentIssuer.valueStart..<sentIssuer.valueEnd, equalText: issuer),
                let audience, let served = servedClientIDs(bytes, audience),
                let issuedAt, issuedAt.kind == .integer, issuedAt.integer >= 0,
                issuedAt.integer <= NotificationClaims.adding(now, leewaySeconds),
                let tokenID, tokenID.kind == .string,
                (1...NotificationClaims.maximumTokenIDLength).contains(tokenID.valueEnd - tokenID.valueStart),
                !NotificationVerifier.holdsDelete(bytes, tokenID.valueStart..<tokenID.valueEnd),
                let events, events.kind == .object,
                let parsed = Self.plainEvents(bytes, events.valueStart..<events.valueEnd)
            else { return nil }
            return VerifiedSecurityEvent(
                clientIDs: served, tokenID: bytes.string(tokenID.valueStart..<tokenID.valueEnd),
                issuedAt: issuedAt.integer, events: parsed)
        }
    }

    /// `servedClientIDs` on a plain `aud`: the configured IDs it names, in its order, each
    /// once; nil when none, or when `aud` is not plain.
    private func servedClientIDs(_ bytes: UnsafeBufferPointer<UInt8>, _ audience: PlainJSONMember) -> [String]? {
        let audiences: [Range<Int>]
        switch audience.kind {
        case .string:
            // One audience (Google's shape): one match at most, and no list to build.
            let range = audience.valueStart..<audience.valueEnd
            return clientIDs.first(where: { bytes.bytes(range, equalText: $0) }).map { [$0] }
        case .array:
            guard let elements = PlainJSONReader.stringElements(bytes, of: audience.valueStart..<audience.valueEnd),
                !elements.isEmpty
            else { return nil }
            audiences = elements
        default: return nil
        }
        var served: [String] = []
        for audience in audiences {
            guard let configured = clientIDs.first(where: { bytes.bytes(audience, equalText: $0) }),
                !served.contains(configured)
            else { continue }
            served.append(configured)
        }
        return served.isEmpty ? nil : served
    }

    /// The events object: 1 to `maximumEventCount` events (the reader holds at most 16
    /// members, the same bound), sorted by their type URI's bytes, each read.
    private static func plainEvents(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> [SecurityEvent]? {
        PlainJSONReader.withReadObject(bytes, in: range) { members -> [SecurityEvent]? in
            guard !members.isEmpty, members.count <= maximumEventCount else { return nil }
            if members.count == 1 {
                // Google sends one event a token: nothing to sort.
                return plainEvent(bytes, members[0]).map { [$0] }
            }
            var order = Array(members.indices)
            order.sort { left, right in
                let a = members[left]
                let b = members[right]
                return UnsafeBufferPointer(rebasing: bytes[a.nameStart..<a.nameEnd]).lexicographicallyPrecedes(
                    UnsafeBufferPointer(rebasing: bytes[b.nameStart..<b.nameEnd]))
            }
            var events: [SecurityEvent] = []
            events.reserveCapacity(members.count)
            for index in order {
                guard let event = plainEvent(bytes, members[index]) else { return nil }
                events.append(event)
            }
            return events
        }
    }

    /// `event(rawType:payload:)` for the types the fast path reads.
    private static func plainEvent(_ bytes: UnsafeBufferPointer<UInt8>, _ member: PlainJSONMember) -> SecurityEvent? {
        let uri = member.nameStart..<member.nameEnd
        guard (1...maximumMemberBytes).contains(uri.count), isPrintable(bytes, uri), member.kind == .object else {
            return nil
        }
        let type = SecurityEventType.named(bytes, uri)
        return PlainJSONReader.withReadObject(bytes, in: member.valueStart..<member.valueEnd) {
            payload -> SecurityEvent? in
            var subject, reason, state: PlainJSONMember?
            for field in payload {
                let name = field.nameStart..<field.nameEnd
                if bytes.bytes(name, equal: "subject") {
                    subject = field
                } else if bytes.bytes(name, equal: "reason") {
                    reason = field
                } else if bytes.bytes(name, equal: "state") {
                    state = field
                }
            }
            switch type {
            case .verification:
                guard let state = shortString(bytes, state) else { return nil }
                return SecurityEvent(type: type, rawType: bytes.string(uri), subject: nil, state: state)
            case .accountDisabled:
                guard let sub = accountSubject(bytes, subject), let reason = shortString(bytes, reason) else {
                    return nil
                }
                return SecurityEvent(type: type, rawType: bytes.string(uri), subject: sub, reason: reason)
            case .sessionsRevoked, .tokensRevoked, .accountEnabled, .accountCredentialChangeRequired:
                guard let sub = accountSubject(bytes, subject) else { return nil }
                return SecurityEvent(type: type, rawType: bytes.string(uri), subject: sub)
            case .tokenRevoked, .unknown: return nil
            }
        }
    }

    /// `accountSubject` on a plain subject: `iss-sub` or `id_token_claims` (by
    /// `subject_type` and/or `format`, agreeing), a non-empty `iss`, a valid `sub`.
    private static func accountSubject(_ bytes: UnsafeBufferPointer<UInt8>, _ subject: PlainJSONMember?) -> String? {
        guard let subject, subject.kind == .object else { return nil }
        return PlainJSONReader.withReadObject(bytes, in: subject.valueStart..<subject.valueEnd) {
            members -> String? in
            var subjectType, format, issuer, sub: PlainJSONMember?
            for member in members {
                let name = member.nameStart..<member.nameEnd
                if bytes.bytes(name, equal: "subject_type") {
                    subjectType = member
                } else if bytes.bytes(name, equal: "format") {
                    format = member
                } else if bytes.bytes(name, equal: "iss") {
                    issuer = member
                } else if bytes.bytes(name, equal: "sub") {
                    sub = member
                }
            }
            if let subjectType, subjectType.kind != .string { return nil }
            if let format, format.kind != .string { return nil }
            guard let named = subjectType ?? format else { return nil }
            let value = named.valueStart..<named.valueEnd
            if let subjectType, let format {
                let other = format.valueStart..<format.valueEnd
                guard
                    UnsafeBufferPointer(rebasing: bytes[subjectType.valueStart..<subjectType.valueEnd]).elementsEqual(
                        UnsafeBufferPointer(rebasing: bytes[other]))
                else { return nil }
            }
            guard bytes.bytes(value, equal: "iss-sub") || bytes.bytes(value, equal: "id_token_claims"),
                let issuer, issuer.kind == .string, issuer.valueEnd > issuer.valueStart,
                let sub, sub.kind == .string
            else { return nil }
            let account = sub.valueStart..<sub.valueEnd
            return UserKeyPart.isValidSubject(UnsafeBufferPointer(rebasing: bytes[account]))
                ? bytes.string(account) : nil
        }
    }

    /// `shortString` on a plain member: `.some(nil)` when absent, the text when it is a
    /// printable string of 1 to 256 bytes, nil (not read here) otherwise.
    private static func shortString(_ bytes: UnsafeBufferPointer<UInt8>, _ member: PlainJSONMember?) -> String?? {
        guard let member else { return .some(nil) }
        let value = member.valueStart..<member.valueEnd
        guard member.kind == .string, (1...maximumMemberBytes).contains(value.count), isPrintable(bytes, value) else {
            return nil
        }
        return .some(bytes.string(value))
    }

    /// 0x20 to 0x7E, as `isPrintable` on a String.
    private static func isPrintable(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        for index in range where bytes[index] < 0x20 || bytes[index] >= 0x7F { return false }
        return true
    }
}

extension SecurityEventType {
    private static let knownURIs: [(uri: [UInt8], type: SecurityEventType)] = allCases.filter { $0 != .unknown }.map {
        (Array($0.uri.utf8), $0)
    }

    /// `init(rawType:)` on bytes: the type whose URI the bytes are exactly, else `unknown`.
    static func named(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> SecurityEventType {
        for known in knownURIs where known.uri.count == range.count {
            let same = known.uri.withUnsafeBufferPointer { uri in
                PlainJSONReader.sameBytes(uri.baseAddress!, bytes.baseAddress! + range.lowerBound, count: range.count)
            }
            if same { return known.type }
        }
        return .unknown
    }
}
