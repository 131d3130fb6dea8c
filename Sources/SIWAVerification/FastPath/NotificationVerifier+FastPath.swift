import SIWACrypto

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The fast path of Apple's notifications: the body, the token, the header, the claims and
/// the event read where they lie (`PlainJSONReader`, `PlainToken`), names compared as
/// bytes, no dictionary, and a `String` made only for what leaves the verifier (kid,
/// subject, type, jti, email). Each step either gives exactly what the strict step would
/// give or says nil, and then the strict step runs on the same bytes: every refusal, with
/// its code and message, comes from the strict steps. The differential tests hold the two
/// to the same answer.
extension NotificationVerifier {
    /// The token of a body `{"payload": "<JWS>"}` the fast path reads whole (the body's
    /// size within the limit, the payload a string without escapes, the token and its
    /// header as `PlainToken` reads them); nil for anything else.
    func plainToken(of body: [UInt8]) -> PlainToken? {
        guard body.count <= maximumBodyBytes else { return nil }
        return body.withUnsafeBufferPointer { bytes -> PlainToken? in
            if let token = Self.payloadOfApplesShape(bytes),
                let read = PlainToken.read(bytes, token: token, checkingSecurityEventType: false)
            {
                return read
            }
            let payload = PlainJSONReader.withObject(bytes, in: 0..<bytes.count) { members -> Range<Int>? in
                for member in members where bytes.bytes(member.nameStart..<member.nameEnd, equal: "payload") {
                    return member.kind == .string ? member.valueStart..<member.valueEnd : nil
                }
                return nil
            }
            guard let payload else { return nil }
            return PlainToken.read(bytes, token: payload, checkingSecurityEventType: false)
        }
    }

    /// Where the token lies in a body of exactly Apple's shape, `{"payload":"<token>"}`
    /// (whitespace allowed between the tokens of JSON): the string's end found with
    /// `memchr`, its bytes not looked at one by one. That is enough because the token is
    /// then read by `PlainToken`, which takes only base64url symbols and two dots (no
    /// backslash, control byte or byte of 0x80 or above, so the string has no escapes and
    /// its text is its bytes); for anything else `PlainToken` says nil.
    static func payloadOfApplesShape(_ bytes: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        guard let base = bytes.baseAddress else { return nil }
        var index = 0
        func skipWhitespace() {
            while index < bytes.count,
                bytes[index] == 0x20 || bytes[index] == 0x09 || bytes[index] == 0x0A
                    || bytes[index] == 0x0D
            {
                index += 1
            }
        }
        func expect(_ text: StaticString) -> Bool {
            skipWhitespace()
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count, PlainJSONReader.sameBytes(base + index, text.utf8Start, count: count)
            else { return false }
            index += count
            return true
        }
        guard expect("{"), expect(#""payload""#), expect(":"), expect("\""),
            let quote = memchr(base + index, Int32(UInt8(ascii: "\"")), bytes.count - index)
        else { return nil }
        let start = index
        index = base.distance(to: quote.assumingMemoryBound(to: UInt8.self)) + 1
        let token = start..<(index - 1)
        guard expect("}") else { return nil }
        skipWhitespace()
        return index == bytes.count ? token : nil
    }

    /// Whether the fast path reads `body` whole (token, header and claims), checks
    /// aside from the signature passing at `now`: for the tests that keep real notifications
    /// on it.
    package func fastPathReads(body: [UInt8], now: Int64) -> Bool {
        guard let token = plainToken(of: body) else { return false }
        return token.decoded.withUnsafeBufferPointer { plainNotification(claims: $0, token.claims, now: now) != nil }
    }

    /// The steps after the fast path read `token` from `body`: the key, the signature, then
    /// the claims (fast, or strict when the fast path does not read them).
    func verify(
        plain token: PlainToken, of body: [UInt8], now: Int64,
        key keyForID: (String) throws(VerificationError) -> RSAPublicKey
    ) throws(VerificationError) -> VerifiedNotification {
        try token.checkSignature(in: body, key: keyForID)
        let notification = token.decoded.withUnsafeBufferPointer { decoded in
            plainNotification(claims: decoded, token.claims, now: now)
        }
        if let notification { return notification }
        return try interpretStrictly(claims: Array(token.decoded[token.claims]), now: now)
    }

    /// The notification the claims in `range` of `bytes` make, when the fast path reads
    /// them and every check passes; nil otherwise (the strict steps then say why).
    func plainNotification(claims bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, now: Int64)
        -> VerifiedNotification?
    {
        PlainJSONReader.withObject(bytes, in: range) { members -> VerifiedNotification? in
            var issuer, audience, expiry, notBefore, issuedAt, tokenID, events: PlainJSONMember?
            for member in members {
                let name = member.nameStart..<member.nameEnd
                switch name.count {
                case 3:
                    if bytes.bytes(name, equal: "iss") {
                        issuer = member
                    } else if bytes.bytes(name, equal: "aud") {
                        audience = member
                    } else if bytes.bytes(name, equal: "exp") {
                        expiry = member
                    } else if bytes.bytes(name, equal: "nbf") {
                        notBefore = member
                    } else if bytes.bytes(name, equal: "iat") {
                        issuedAt = member
                    } else if bytes.bytes(name, equal: "jti") {
                        tokenID = member
                    }
                case 6: if bytes.bytes(name, equal: "events") { events = member }
                default: continue
                }
            }
            guard let issuer, issuer.kind == .string,
                bytes.bytes(issuer.valueStart..<issuer.valueEnd, equalText: NotificationVerifier.appleIssuer),
                let audience, let clientID = Self.servedClientID(bytes, audience, clientIDs: clientIDs),
                let expiresAt = Self.optionalNumericDate(expiry),
                let notBeforeTime = Self.optionalNumericDate(notBefore),
                let issuedAt, issuedAt.kind == .integer, issuedAt.integer >= 0,
                let tokenID, tokenID.kind == .string,
                (1...NotificationClaims.maximumTokenIDLength).contains(tokenID.valueEnd - tokenID.valueStart),
                !Self.holdsDelete(bytes, tokenID.valueStart..<tokenID.valueEnd),
                let events,
                (try? NotificationClaims.checkTimes(
                    issuedAt: issuedAt.integer, expiresAt: expiresAt, notBefore: notBeforeTime, now: now,
                    leewaySeconds: leewaySeconds)) != nil,
                let event = Self.plainEvent(in: bytes, events),
                event.eventTimeMilliseconds / 1000 <= NotificationClaims.adding(issuedAt.integer, leewaySeconds)
            else { return nil }
            return VerifiedNotification(
                clientID: clientID, subject: event.subject, type: event.type, rawType: event.rawType,
                eventTimeMilliseconds: event.eventTimeMilliseconds,
                tokenID: bytes.string(tokenID.valueStart..<tokenID.valueEnd), issuedAt: issuedAt.integer,
                expiresAt: expiresAt, email: event.email, isPrivateEmail: event.isPrivateEmail)
        }
    }

    /// The configured client ID `aud` names first (a string, or a non-empty array of
    /// strings, matched byte for byte), the configured spelling; nil when none, or when
    /// `aud` is not plain.
    static func servedClientID(
        _ bytes: UnsafeBufferPointer<UInt8>, _ audience: PlainJSONMember, clientIDs: Set<String>
    ) -> String? {
        switch audience.kind {
        case .string:
            return clientIDs.first { bytes.bytes(audience.valueStart..<audience.valueEnd, equalText: $0) }
        case .array:
            guard let elements = PlainJSONReader.stringElements(bytes, of: audience.valueStart..<audience.valueEnd),
                !elements.isEmpty
            else { return nil }
            for element in elements {
                if let served = clientIDs.first(where: { bytes.bytes(element, equalText: $0) }) { return served }
            }
            return nil
        default: return nil
        }
    }

    /// An optional NumericDate: `.some(nil)` when absent, `.some(seconds)` for a
    /// non-negative integer, nil (not read here) for anything else.
    static func optionalNumericDate(_ member: PlainJSONMember?) -> Int64?? {
        guard let member else { return .some(nil) }
        guard member.kind == .integer, member.integer >= 0 else { return nil }
        return .some(member.integer)
    }

    /// Whether the bytes hold DEL (0x7F), the one control byte the plain reader lets
    /// through inside a string.
    static func holdsDelete(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        for index in range where bytes[index] == 0x7F { return true }
        return false
    }

    /// The `events` claim: an object in the claims, or a string holding one (Apple's), read
    /// in place or from its unescaped text.
    static func plainEvent(in bytes: UnsafeBufferPointer<UInt8>, _ events: PlainJSONMember) -> PlainEvent? {
        let range = events.valueStart..<events.valueEnd
        switch events.kind {
        case .object, .string: return PlainEvent(bytes, range)
        case .escapedString:
            let capacity = PlainJSONReader.unescapeCapacity(range.count)
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { output in
                let count = PlainJSONReader.unescape(bytes, range, into: output)
                return PlainEvent(UnsafeBufferPointer(output), 0..<count)
            }
        default: return nil
        }
    }
}

/// The event of a notification, read by the fast path: `NotificationEventClaim`'s checks on
/// plain members.
struct PlainEvent {
    let type: NotificationEventType
    let rawType: String
    let subject: String
    let eventTimeMilliseconds: Int64
    let email: String?
    let isPrivateEmail: Bool?

    init?(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) {
        let read = PlainJSONReader.withObject(bytes, in: range) { members -> PlainEvent? in
            var type, subject, eventTime, email, isPrivateEmail: PlainJSONMember?
            for member in members {
                let name = member.nameStart..<member.nameEnd
                // By length first: the five names have five lengths.
                switch name.count {
                case 4: if bytes.bytes(name, equal: "type") { type = member }
                case 3: if bytes.bytes(name, equal: "sub") { subject = member }
                case 10: if bytes.bytes(name, equal: "event_time") { eventTime = member }
                case 5: if bytes.bytes(name, equal: "email") { email = member }
                case 16: if bytes.bytes(name, equal: "is_private_email") { isPrivateEmail = member }
                default: continue
                }
            }
            guard let type, type.kind == .string, (1...128).contains(type.valueEnd - type.valueStart),
                Self.isVisibleASCII(bytes, type.valueStart..<type.valueEnd),
                let subject, subject.kind == .string,
                let eventTime, eventTime.kind == .integer, eventTime.integer >= 0
            else { return nil }
            let rawType = bytes.string(type.valueStart..<type.valueEnd)
            let eventType = NotificationEventType(rawType: rawType)
            guard
                UserKeyPart.isValidSubject(UnsafeBufferPointer(rebasing: bytes[subject.valueStart..<subject.valueEnd]))
            else { return nil }
            let subjectText = bytes.string(subject.valueStart..<subject.valueEnd)
            let time = eventTime.integer
            let milliseconds = time < NotificationEventClaim.millisecondsThreshold ? time * 1000 : time
            guard eventType.isEmailEvent else {
                return PlainEvent(
                    type: eventType, rawType: rawType, subject: subjectText, eventTimeMilliseconds: milliseconds,
                    email: nil, isPrivateEmail: nil)
            }
            guard let email, email.kind == .string,
                (1...NotificationEventClaim.maximumEmailLength).contains(email.valueEnd - email.valueStart),
                !NotificationVerifier.holdsDelete(bytes, email.valueStart..<email.valueEnd)
            else { return nil }
            let privacy: Bool?
            switch isPrivateEmail?.kind {
            case nil: privacy = nil
            case .trueValue?: privacy = true
            case .falseValue?: privacy = false
            case .string?:
                let value = isPrivateEmail!.valueStart..<isPrivateEmail!.valueEnd
                if bytes.bytes(value, equal: "true") {
                    privacy = true
                } else if bytes.bytes(value, equal: "false") {
                    privacy = false
                } else {
                    return nil
                }
            default: return nil
            }
            return PlainEvent(
                type: eventType, rawType: rawType, subject: subjectText, eventTimeMilliseconds: milliseconds,
                email: bytes.string(email.valueStart..<email.valueEnd), isPrivateEmail: privacy)
        }
        guard let read else { return nil }
        self = read
    }

    private init(
        type: NotificationEventType, rawType: String, subject: String, eventTimeMilliseconds: Int64, email: String?,
        isPrivateEmail: Bool?
    ) {
        self.type = type
        self.rawType = rawType
        self.subject = subject
        self.eventTimeMilliseconds = eventTimeMilliseconds
        self.email = email
        self.isPrivateEmail = isPrivateEmail
    }

    /// 0x21 to 0x7E only, as `type` must be.
    static func isVisibleASCII(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        for index in range where bytes[index] <= 0x20 || bytes[index] >= 0x7F { return false }
        return true
    }
}
