import SIWAJSON

/// The `events` claim: one object (Apple documents it) or a JSON string holding
/// one (Apple sends it), never an array despite the plural.
struct NotificationEventClaim {
    /// Below this, `event_time` is read as seconds (Apple's documented example);
    /// at or above, as milliseconds (what Apple sends). 10^11 ms is March 1973;
    /// 10^11 s is the year 5138.
    static let millisecondsThreshold: Int64 = 100_000_000_000
    static let maximumEmailLength = 320

    let type: NotificationEventType
    let rawType: String
    let subject: String
    let eventTimeMilliseconds: Int64
    let email: String?
    let isPrivateEmail: Bool?

    init(_ claim: JSONValue) throws(VerificationError) {
        let members: [String: JSONValue]
        switch claim {
        case .object(let object): members = object
        case .string(let text): members = try JSONDocument.events.parseObject(text.utf8)
        default:
            throw VerificationError(
                .eventsWrongType, "events is a JSON \(claim.typeName), not an object or a string holding one")
        }

        switch members["type"] {
        case nil: throw VerificationError(.eventTypeMissing, "the event has no type")
        case .string(let raw)?
        where !raw.isEmpty && raw.utf8.count <= 128
            && raw.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }):
            rawType = raw
        default:
            throw VerificationError(
                .eventTypeInvalid, "the event's type is not a string of 1 to 128 visible ASCII characters")
        }
        type = NotificationEventType(rawType: rawType)

        switch members["sub"] {
        case nil: throw VerificationError(.eventSubMissing, "the event has no sub")
        case .string(let sub)? where UserKeyPart.isValidSubject(sub): subject = sub
        default:
            throw VerificationError(
                .eventSubInvalid, "the event's sub is not a string of 1 to 255 visible ASCII characters")
        }

        switch members["event_time"] {
        case nil: throw VerificationError(.eventTimeMissing, "the event has no event_time")
        case .integer(let time)? where time >= 0:
            eventTimeMilliseconds = time < Self.millisecondsThreshold ? time * 1000 : time
        default: throw VerificationError(.eventTimeInvalid, "event_time is not a non-negative integer")
        }

        guard type.isEmailEvent else {
            email = nil
            isPrivateEmail = nil
            return
        }
        switch members["email"] {
        case nil: throw VerificationError(.emailMissing, "the \(type.name) event has no email")
        case .string(let address)?
        where !address.isEmpty && address.utf8.count <= Self.maximumEmailLength
            && !address.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }):
            email = address
        default: throw VerificationError(.emailInvalid, "the event's email is not a string of 1 to 320 bytes")
        }
        switch members["is_private_email"] {
        case nil: isPrivateEmail = nil
        case .string("true")?, .bool(true)?: isPrivateEmail = true
        case .string("false")?, .bool(false)?: isPrivateEmail = false
        default:
            throw VerificationError(
                .isPrivateEmailInvalid, "is_private_email is not \"true\", \"false\", true or false")
        }
    }
}
