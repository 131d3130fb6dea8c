import SIWAJSON
import SIWAVerification

/// One user of the reconcile input: a JSON line
/// `{"client_id": "...", "sub": "...", "refresh_token": "..."}`. Other members are
/// ignored. A problem is named by a code that never quotes the line.
public struct ReconcileLine: Sendable, Equatable {
    public static let maximumBytes = 16_384

    public let clientID: String
    public let subject: String
    public let refreshToken: String

    /// Why a line was skipped: a code, never the line's content.
    public struct Problem: Error, Sendable, Equatable {
        public let code: String
    }

    public init(parsing bytes: [UInt8]) throws(Problem) {
        let members = try Self.object(bytes)
        (clientID, subject) = try Self.user(members)
        refreshToken = try Self.token(members, "refresh_token")
    }

    /// The line as a JSON object, at most `maximumBytes` long.
    static func object(_ bytes: [UInt8]) throws(Problem) -> [String: JSONValue] {
        guard bytes.count <= Self.maximumBytes else { throw Problem(code: "line_too_long") }
        let value: JSONValue
        do {
            value = try StrictJSONParser.parse(bytes)
        } catch {
            throw Problem(code: "not_json")
        }
        guard case .object(let members) = value else { throw Problem(code: "not_object") }
        return members
    }

    static func text(_ members: [String: JSONValue], _ name: String) throws(Problem) -> String {
        guard let member = members[name] else { throw Problem(code: "\(name)_missing") }
        guard case .string(let string) = member else { throw Problem(code: "\(name)_invalid") }
        return string
    }

    /// `client_id` and `sub`, checked as the responder checks them.
    static func user(_ members: [String: JSONValue]) throws(Problem) -> (clientID: String, subject: String) {
        let clientID = try text(members, "client_id")
        guard UserKeyPart.isValidClientID(clientID) else { throw Problem(code: "client_id_invalid") }
        let subject = try text(members, "sub")
        guard UserKeyPart.isValidSubject(subject) else { throw Problem(code: "sub_invalid") }
        return (clientID, subject)
    }

    /// A token member: visible ASCII, at most 4096 bytes.
    static func token(_ members: [String: JSONValue], _ name: String) throws(Problem) -> String {
        let token = try text(members, name)
        guard !token.isEmpty, token.utf8.count <= 4096, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw Problem(code: "\(name)_invalid")
        }
        return token
    }
}
