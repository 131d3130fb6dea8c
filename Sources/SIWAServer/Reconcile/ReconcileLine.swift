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
        guard bytes.count <= Self.maximumBytes else { throw Problem(code: "line_too_long") }
        let value: JSONValue
        do {
            value = try StrictJSONParser.parse(bytes)
        } catch {
            throw Problem(code: "not_json")
        }
        guard case .object(let members) = value else { throw Problem(code: "not_object") }
        func text(_ name: String) throws(Problem) -> String {
            guard let member = members[name] else { throw Problem(code: "\(name)_missing") }
            guard case .string(let string) = member else { throw Problem(code: "\(name)_invalid") }
            return string
        }
        clientID = try text("client_id")
        guard ServerConfiguration.isValidClientID(clientID) else { throw Problem(code: "client_id_invalid") }
        subject = try text("sub")
        // Visible ASCII without braces: a brace would move the key's hash tag.
        guard !subject.isEmpty, subject.utf8.count <= 255,
            subject.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "{") && $0 != UInt8(ascii: "}") })
        else { throw Problem(code: "sub_invalid") }
        refreshToken = try text("refresh_token")
        guard !refreshToken.isEmpty, refreshToken.utf8.count <= 4096,
            refreshToken.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else { throw Problem(code: "refresh_token_invalid") }
    }
}
