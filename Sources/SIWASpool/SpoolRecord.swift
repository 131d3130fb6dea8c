import SIWAJSON
import SIWAVerification

/// One spool record per line: `<JSON byte count> <CRC-32 of the JSON, 8 hex> <JSON>\n`.
///
/// The JSON holds every field of `VerifiedNotification`, email included, which is why
/// spool files are mode 0600 in a 0700 directory. JSONWriter escapes every control
/// character, so a newline only ever ends a record: a corrupt line can be set aside and
/// the next one read, and a segment not ending in a newline ends in a torn record.
package enum SpoolRecord {
    static let version: Int64 = 1

    /// `spooledAt` (Unix ms) is when the record was written, for `spool status`'s oldest age;
    /// records of earlier releases have none. `attemptedAt` (Unix ms) is the receive time of
    /// the Redis call that did not answer before the record was spooled (nil when none was
    /// made): the seen marker's value if that call ran after all, so the replay can answer
    /// `stored` for it instead of `duplicate`.
    package static func encode(_ notification: VerifiedNotification, spooledAt: Int64? = nil, attemptedAt: Int64? = nil)
        -> [UInt8]
    {
        var members: [(String, JSONValue)] = [
            ("v", .integer(version)),
            ("aud", .string(notification.clientID)),
            ("sub", .string(notification.subject)),
            ("type", .string(notification.type.name)),
            ("raw_type", .string(notification.rawType)),
            ("event_time_ms", .integer(notification.eventTimeMilliseconds)),
            ("jti", .string(notification.tokenID)),
            ("iat", .integer(notification.issuedAt)),
            ("exp", notification.expiresAt.map { .integer($0) } ?? .null),
            ("email", notification.email.map { .string($0) } ?? .null),
            ("is_private_email", notification.isPrivateEmail.map { .bool($0) } ?? .null),
        ]
        if let spooledAt { members.append(("spooled_at", .integer(spooledAt))) }
        if let attemptedAt { members.append(("attempted_at", .integer(attemptedAt))) }
        return frame(JSONWriter.object(members))
    }

    /// The `provider` member of a Google record. An Apple record has none (records of
    /// earlier releases are all Apple's, and keep reading as Apple's).
    static let googleProvider = "google"

    /// A verified Security Event Token from Google, with the same framing, `spooled_at` and
    /// `attempted_at` as Apple's: `{"v":1,"provider":"google","aud":[...],"jti","iat",
    /// "events":[{"raw_type","sub","reason","state","token_type","token_identifier_alg",
    /// "token"}]}`. `aud` holds the configured client IDs the token named (already checked),
    /// each event its raw type URI (its type is derived again on reading, byte for byte).
    /// A release without this kind reads such a line as malformed (it has no `sub`) and sets
    /// it aside as torn, never applies it as Apple's.
    package static func encode(
        _ securityEvent: VerifiedSecurityEvent, spooledAt: Int64? = nil, attemptedAt: Int64? = nil
    )
        -> [UInt8]
    {
        var events: [JSONValue] = []
        for event in securityEvent.events {
            var members: [(String, JSONValue)] = [
                ("raw_type", .string(event.rawType)),
                ("sub", event.subject.map { .string($0) } ?? .null),
                ("reason", event.reason.map { .string($0) } ?? .null),
                ("state", event.state.map { .string($0) } ?? .null),
            ]
            if let token = event.revokedToken {
                members += [
                    ("token_type", .string(token.tokenType)),
                    ("token_identifier_alg", .string(token.identifierAlgorithm)),
                    ("token", .string(token.identifier)),
                ]
            }
            events.append(.object(Dictionary(uniqueKeysWithValues: members)))
        }
        var members: [(String, JSONValue)] = [
            ("v", .integer(version)),
            ("provider", .string(googleProvider)),
            ("aud", .array(securityEvent.clientIDs.map { .string($0) })),
            ("jti", .string(securityEvent.tokenID)),
            ("iat", .integer(securityEvent.issuedAt)),
            ("events", .array(events)),
        ]
        if let spooledAt { members.append(("spooled_at", .integer(spooledAt))) }
        if let attemptedAt { members.append(("attempted_at", .integer(attemptedAt))) }
        return frame(JSONWriter.object(members))
    }

    private static func frame(_ json: String) -> [UInt8] {
        let body = Array(json.utf8)
        return Array("\(body.count) \(CRC32.hex(CRC32.checksum(body))) ".utf8) + body + [0x0A]
    }

    package enum Decoded {
        case notification(VerifiedNotification, spooledAt: Int64?, attemptedAt: Int64?)
        case securityEvent(VerifiedSecurityEvent, spooledAt: Int64?, attemptedAt: Int64?)
        case bad(SpoolTornRecord.Reason)
    }

    /// Decodes one line without its newline.
    package static func decode(_ line: ArraySlice<UInt8>) -> Decoded {
        let space = UInt8(ascii: " ")
        guard let firstSpace = line.firstIndex(of: space),
            let length = Int(String(decoding: line[line.startIndex..<firstSpace], as: UTF8.self)),
            // Eight hex digits and a space must follow the first space, inside the line.
            line.distance(from: firstSpace, to: line.endIndex) > 9,
            line[firstSpace + 9] == space,
            let checksum = UInt32(String(decoding: line[(firstSpace + 1)..<(firstSpace + 9)], as: UTF8.self), radix: 16)
        else { return .bad(.malformed) }
        let body = line[(firstSpace + 10)...]
        guard body.count == length else { return .bad(.malformed) }
        guard CRC32.checksum(body) == checksum else { return .bad(.checksumMismatch) }
        guard case .object(let fields)? = try? StrictJSONParser.parse(body),
            let spooledAt = optionalInteger(fields["spooled_at"] ?? .null),
            let attemptedAt = optionalInteger(fields["attempted_at"] ?? .null)
        else { return .bad(.malformed) }
        switch fields["provider"] {
        case nil:
            guard let notification = notification(fields) else { return .bad(.malformed) }
            return .notification(notification, spooledAt: spooledAt, attemptedAt: attemptedAt)
        case .string(let provider)? where provider.utf8.elementsEqual(googleProvider.utf8):
            guard let securityEvent = securityEvent(fields) else { return .bad(.malformed) }
            return .securityEvent(securityEvent, spooledAt: spooledAt, attemptedAt: attemptedAt)
        default:
            // A provider this release does not know: not applied as anyone's.
            return .bad(.malformed)
        }
    }

    private static func securityEvent(_ fields: [String: JSONValue]) -> VerifiedSecurityEvent? {
        guard case .integer(version)? = fields["v"],
            case .array(let audience)? = fields["aud"], !audience.isEmpty,
            case .string(let tokenID)? = fields["jti"],
            case .integer(let issuedAt)? = fields["iat"],
            case .array(let eventValues)? = fields["events"], !eventValues.isEmpty
        else { return nil }
        var clientIDs: [String] = []
        for value in audience {
            guard case .string(let clientID) = value else { return nil }
            clientIDs.append(clientID)
        }
        var events: [SecurityEvent] = []
        for value in eventValues {
            guard case .object(let members) = value, case .string(let rawType)? = members["raw_type"],
                let subject = optionalString(members["sub"]), let reason = optionalString(members["reason"]),
                let state = optionalString(members["state"])
            else { return nil }
            var revokedToken: RevokedToken?
            switch (members["token_type"], members["token_identifier_alg"], members["token"]) {
            case (nil, nil, nil): break
            case (.string(let tokenType)?, .string(let algorithm)?, .string(let identifier)?):
                revokedToken = RevokedToken(
                    tokenType: tokenType, identifierAlgorithm: algorithm, identifier: identifier)
            default: return nil
            }
            events.append(
                SecurityEvent(
                    type: SecurityEventType(rawType: rawType), rawType: rawType, subject: subject, reason: reason,
                    state: state, revokedToken: revokedToken))
        }
        return VerifiedSecurityEvent(clientIDs: clientIDs, tokenID: tokenID, issuedAt: issuedAt, events: events)
    }

    private static func notification(_ fields: [String: JSONValue]) -> VerifiedNotification? {
        guard case .integer(version)? = fields["v"],
            case .string(let clientID)? = fields["aud"],
            case .string(let subject)? = fields["sub"],
            case .string(let typeName)? = fields["type"],
            case .string(let rawType)? = fields["raw_type"],
            case .integer(let eventTime)? = fields["event_time_ms"],
            case .string(let tokenID)? = fields["jti"],
            case .integer(let issuedAt)? = fields["iat"],
            let expiresAt = optionalInteger(fields["exp"]),
            let email = optionalString(fields["email"]),
            let isPrivateEmail = optionalBool(fields["is_private_email"])
        else { return nil }
        // The normalised name maps back to its own case (and "unknown" to .unknown), so the
        // record round-trips even when `type` and `rawType` disagree.
        return VerifiedNotification(
            clientID: clientID, subject: subject, type: NotificationEventType(rawType: typeName), rawType: rawType,
            eventTimeMilliseconds: eventTime, tokenID: tokenID, issuedAt: issuedAt, expiresAt: expiresAt,
            email: email, isPrivateEmail: isPrivateEmail)
    }

    // Each returns nil for a wrong type, .some(nil) for JSON null.
    private static func optionalInteger(_ value: JSONValue?) -> Int64?? {
        switch value {
        case .null?: .some(nil)
        case .integer(let number)?: .some(number)
        default: nil
        }
    }

    private static func optionalString(_ value: JSONValue?) -> String?? {
        switch value {
        case .null?: .some(nil)
        case .string(let text)?: .some(text)
        default: nil
        }
    }

    private static func optionalBool(_ value: JSONValue?) -> Bool?? {
        switch value {
        case .null?: .some(nil)
        case .bool(let flag)?: .some(flag)
        default: nil
        }
    }
}
