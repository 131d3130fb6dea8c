import SIWAJSON

/// Why a notification was refused: a stable code, its class (the responder maps a class to
/// an HTTP status), and a plain message that never quotes the token or the body.
public struct VerificationError: Error, Sendable, Equatable, CustomStringConvertible {
    public let code: Code
    public let message: String
    /// For `iat_in_future`: the token's `iat` and the verifier's clock, in Unix seconds, so
    /// the log can show a host clock that is behind. Nil for every other code.
    public internal(set) var issuedAt: Int64? = nil
    public internal(set) var serverTime: Int64? = nil

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var failureClass: FailureClass { code.failureClass }
    public var description: String { "\(code.rawValue): \(message)" }

    public static func == (lhs: VerificationError, rhs: VerificationError) -> Bool { lhs.code == rhs.code }

    /// The classes a responder maps to statuses.
    public enum FailureClass: String, Sendable {
        /// The request is not a well-formed notification: sending it again cannot help.
        case malformed
        /// The body is over the size limit.
        case tooLarge = "too_large"
        /// The token is not proven to come from Apple.
        case notAuthentic = "not_authentic"
        /// Authentic, but for a client ID this deployment does not serve.
        case notOurs = "not_ours"
        /// Cannot decide now (no keys yet, or our entry for the kid is unusable): the same
        /// notification may pass later.
        case retryable
    }

    /// A stable, machine-readable error code. New codes break no caller.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public let failureClass: FailureClass

        init(_ rawValue: String, _ failureClass: FailureClass) {
            self.rawValue = rawValue
            self.failureClass = failureClass
        }

        public var description: String { rawValue }

        public static func == (lhs: Code, rhs: Code) -> Bool { lhs.rawValue == rhs.rawValue }
        public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }

        // The request body.
        public static let bodyTooLarge = Code("body_too_large", .tooLarge)
        public static let bodyNotJSON = Code("body_not_json", .malformed)
        public static let bodyTooDeep = Code("body_too_deep", .malformed)
        public static let bodyDuplicateMember = Code("body_duplicate_member", .malformed)
        public static let bodyNotObject = Code("body_not_object", .malformed)
        public static let payloadMissing = Code("payload_missing", .malformed)
        public static let payloadNotString = Code("payload_not_string", .malformed)

        // The compact JWS.
        public static let tokenSegmentCount = Code("token_segment_count", .malformed)
        public static let tokenEmptySegment = Code("token_empty_segment", .malformed)
        public static let tokenNotBase64URL = Code("token_not_base64url", .malformed)

        // The protected header.
        public static let headerNotJSON = Code("header_not_json", .malformed)
        public static let headerTooDeep = Code("header_too_deep", .malformed)
        public static let headerDuplicateMember = Code("header_duplicate_member", .malformed)
        public static let headerNotObject = Code("header_not_object", .malformed)
        public static let algMissing = Code("alg_missing", .notAuthentic)
        public static let algNotAllowed = Code("alg_not_allowed", .notAuthentic)
        public static let critNotSupported = Code("crit_not_supported", .notAuthentic)
        public static let kidMissing = Code("kid_missing", .malformed)
        public static let kidInvalid = Code("kid_invalid", .malformed)

        // The key.
        public static let keysUnavailable = Code("keys_unavailable", .retryable)
        public static let kidUnknown = Code("kid_unknown", .notAuthentic)
        // The entry our key set holds under the token's kid cannot verify. That is about
        // our key set (a bad merge, a damaged document), never about the token: retryable, after
        // the unknown-kid refresh was tried, so a fixed JWKS host ends it.
        public static let keyNotRSA = Code("key_not_rsa", .retryable)
        public static let keyUseNotSig = Code("key_use_not_sig", .retryable)
        public static let keyAlgNotRS256 = Code("key_alg_not_rs256", .retryable)
        public static let keyTooSmall = Code("key_too_small", .retryable)
        public static let keyInvalid = Code("key_invalid", .retryable)

        /// Whether the code refuses the entry our key set holds for the kid.
        public var isAboutOurKeySet: Bool {
            [Code.keyNotRSA, .keyUseNotSig, .keyAlgNotRS256, .keyTooSmall, .keyInvalid].contains(self)
        }

        // The signature.
        public static let signatureLengthMismatch = Code("signature_length_mismatch", .notAuthentic)
        public static let signatureInvalid = Code("signature_invalid", .notAuthentic)

        // The claims.
        public static let claimsNotJSON = Code("claims_not_json", .malformed)
        public static let claimsTooDeep = Code("claims_too_deep", .malformed)
        public static let claimsDuplicateMember = Code("claims_duplicate_member", .malformed)
        public static let claimsNotObject = Code("claims_not_object", .malformed)
        public static let issMissing = Code("iss_missing", .notAuthentic)
        public static let issMismatch = Code("iss_mismatch", .notAuthentic)
        public static let audMissing = Code("aud_missing", .malformed)
        public static let audInvalid = Code("aud_invalid", .malformed)
        public static let audNotServed = Code("aud_not_served", .notOurs)
        public static let expInvalid = Code("exp_invalid", .malformed)
        public static let tokenExpired = Code("token_expired", .notAuthentic)
        /// `exp` later than `iat` plus the longest lifetime accepted (Apple's is one day):
        /// a far-future token could be replayed once its `jti` marker has expired.
        public static let expBeyondLifetime = Code("exp_beyond_lifetime", .notAuthentic)
        public static let nbfInvalid = Code("nbf_invalid", .malformed)
        /// `nbf` later than now plus the leeway.
        public static let tokenNotYetValid = Code("token_not_yet_valid", .notAuthentic)
        public static let iatMissing = Code("iat_missing", .malformed)
        public static let iatInvalid = Code("iat_invalid", .malformed)
        public static let iatInFuture = Code("iat_in_future", .notAuthentic)
        public static let jtiMissing = Code("jti_missing", .malformed)
        public static let jtiInvalid = Code("jti_invalid", .malformed)

        // The events claim.
        public static let eventsMissing = Code("events_missing", .malformed)
        public static let eventsWrongType = Code("events_wrong_type", .malformed)
        public static let eventsNotJSON = Code("events_not_json", .malformed)
        public static let eventsTooDeep = Code("events_too_deep", .malformed)
        public static let eventsDuplicateMember = Code("events_duplicate_member", .malformed)
        public static let eventsNotObject = Code("events_not_object", .malformed)
        public static let eventTypeMissing = Code("event_type_missing", .malformed)
        public static let eventTypeInvalid = Code("event_type_invalid", .malformed)
        public static let eventSubMissing = Code("event_sub_missing", .malformed)
        public static let eventSubInvalid = Code("event_sub_invalid", .malformed)
        public static let eventTimeMissing = Code("event_time_missing", .malformed)
        public static let eventTimeInvalid = Code("event_time_invalid", .malformed)
        /// An authentic event_time later than iat plus the leeway: an event cannot happen after
        /// the token about it was issued, and a time far ahead would hold the user's state
        /// (times only move forward) until that time. Apple's real ones are seconds before iat.
        public static let eventTimeInFuture = Code("event_time_in_future", .notAuthentic)
        public static let emailMissing = Code("email_missing", .malformed)
        public static let emailInvalid = Code("email_invalid", .malformed)
        public static let isPrivateEmailInvalid = Code("is_private_email_invalid", .malformed)

        // A Security Event Token (Google's Cross-Account Protection).
        /// The header's `typ` is neither absent, `secevent+jwt` nor `JWT`.
        public static let typNotAllowed = Code("typ_not_allowed", .malformed)
        /// `events` is an empty object.
        public static let eventsEmpty = Code("events_empty", .malformed)
        /// `events` holds more events than one token is allowed to carry.
        public static let eventsTooMany = Code("events_too_many", .malformed)
        /// An event's payload is not a JSON object.
        public static let eventPayloadNotObject = Code("event_payload_not_object", .malformed)
        /// An event that names a user carries no `subject`.
        public static let subjectMissing = Code("subject_missing", .malformed)
        /// The `subject` is not an object, or a member it needs is missing or not a string of
        /// the allowed shape (a `sub` outside the key-part rule, a token identifier too long).
        public static let subjectInvalid = Code("subject_invalid", .malformed)
        /// The subject's `subject_type` / `format` is not one this event accepts (or the two
        /// disagree).
        public static let subjectFormatNotAccepted = Code("subject_format_not_accepted", .malformed)
        /// `account-disabled`'s `reason` or `verification`'s `state` is not a short printable string.
        public static let eventMemberInvalid = Code("event_member_invalid", .malformed)

        /// Every code, for documentation and exhaustive tests.
        public static let all: [Code] = [
            bodyTooLarge, bodyNotJSON, bodyTooDeep, bodyDuplicateMember, bodyNotObject, payloadMissing,
            payloadNotString, tokenSegmentCount, tokenEmptySegment, tokenNotBase64URL, headerNotJSON,
            headerTooDeep, headerDuplicateMember, headerNotObject, algMissing, algNotAllowed, critNotSupported,
            kidMissing, kidInvalid, keysUnavailable, kidUnknown, keyNotRSA, keyUseNotSig, keyAlgNotRS256,
            keyTooSmall, keyInvalid, signatureLengthMismatch, signatureInvalid, claimsNotJSON, claimsTooDeep,
            claimsDuplicateMember, claimsNotObject, issMissing, issMismatch, audMissing, audInvalid,
            audNotServed, expInvalid, tokenExpired, expBeyondLifetime, nbfInvalid, tokenNotYetValid, iatMissing,
            iatInvalid, iatInFuture, jtiMissing,
            jtiInvalid, eventsMissing, eventsWrongType, eventsNotJSON, eventsTooDeep, eventsDuplicateMember,
            eventsNotObject, eventTypeMissing, eventTypeInvalid, eventSubMissing, eventSubInvalid,
            eventTimeMissing, eventTimeInvalid, eventTimeInFuture, emailMissing, emailInvalid, isPrivateEmailInvalid,
            typNotAllowed, eventsEmpty, eventsTooMany, eventPayloadNotObject, subjectMissing, subjectInvalid,
            subjectFormatNotAccepted, eventMemberInvalid,
        ]
    }
}

/// The JSON documents inside a notification, for mapping parser problems to codes.
enum JSONDocument {
    case body, header, claims, events

    func error(for problem: JSONProblem) -> VerificationError {
        let (notJSON, tooDeep, duplicate, name):
            (VerificationError.Code, VerificationError.Code, VerificationError.Code, String) =
                switch self {
                case .body: (.bodyNotJSON, .bodyTooDeep, .bodyDuplicateMember, "request body")
                case .header: (.headerNotJSON, .headerTooDeep, .headerDuplicateMember, "JWS header")
                case .claims: (.claimsNotJSON, .claimsTooDeep, .claimsDuplicateMember, "JWS claims")
                case .events: (.eventsNotJSON, .eventsTooDeep, .eventsDuplicateMember, "events claim")
                }
        switch problem {
        case .syntax(let offset): return VerificationError(notJSON, "the \(name) is not valid JSON (at byte \(offset))")
        case .tooDeep(let limit): return VerificationError(tooDeep, "the \(name) nests deeper than \(limit) levels")
        case .duplicateMember:
            // The member name comes from the sender; it is not echoed.
            return VerificationError(duplicate, "the \(name) names a member twice")
        }
    }

    func notObject(_ value: JSONValue) -> VerificationError {
        switch self {
        case .body: VerificationError(.bodyNotObject, "the request body is a JSON \(value.typeName), not an object")
        case .header: VerificationError(.headerNotObject, "the JWS header is a JSON \(value.typeName), not an object")
        case .claims: VerificationError(.claimsNotObject, "the JWS claims are a JSON \(value.typeName), not an object")
        case .events:
            VerificationError(.eventsNotObject, "the events string holds a JSON \(value.typeName), not an object")
        }
    }

    func parseObject(_ bytes: some Collection<UInt8>) throws(VerificationError) -> [String: JSONValue] {
        let value: JSONValue
        do { value = try StrictJSONParser.parse(bytes) } catch { throw self.error(for: error) }
        guard case .object(let members) = value else { throw notObject(value) }
        return members
    }
}
