import Foundation
import SIWAJSON
import SIWAResponder
import SIWAVerification

/// `verify`: checks one captured request body, so an operator can see why a
/// notification was refused. Exit 0 verified, 1 refused, 2 usage.
enum VerifyCommand {
    static let help = """
        usage: siwa-endpoint verify --jwks FILE --client-id ID [--client-id ID ...]
                                    [--at UNIX_SECONDS] [FILE|-]

        Reads the request body from FILE (or standard input) and verifies it against
        the JWKS at time --at (default now). Prints one JSON object: the notification
        on success (exit 0), or {"error","http_status","message"} (exit 1).
        """

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(words, valueOptions: ["--jwks", "--client-id", "--at"])
        let clientIDs = arguments.all("--client-id")
        guard !clientIDs.isEmpty else { throw UsageError("--client-id is required") }
        guard arguments.positionals.count <= 1 else { throw UsageError("give at most one body FILE") }
        let jwksPath = try arguments.required("--jwks")
        guard let jwksBytes = FileManager.default.contents(atPath: jwksPath) else {
            throw UsageError("cannot read --jwks \(jwksPath)")
        }
        let keys: JSONWebKeySet
        do { keys = try JSONWebKeySet(jsonBytes: Array(jwksBytes)) } catch {
            throw UsageError("--jwks \(jwksPath): \(error.description)")
        }
        let now = try arguments.integer("--at") ?? Int64(Date().timeIntervalSince1970)

        let body: Data
        switch arguments.positionals.first {
        case nil, "-"?: body = FileHandle.standardInput.readDataToEndOfFile()
        case let path?:
            guard let contents = FileManager.default.contents(atPath: path) else {
                throw UsageError("cannot read \(path)")
            }
            body = contents
        }

        let verifier = NotificationVerifier(keys: keys, clientIDs: Set(clientIDs))
        do {
            let notification = try verifier.verify(body: Array(body), now: now)
            Output.line(JSONWriter.object(report(notification)))
            return 0
        } catch {
            Output.line(
                JSONWriter.object([
                    ("error", .string(error.code.rawValue)),
                    ("http_status", .integer(Int64(NotificationResponder.httpStatus(for: error)))),
                    ("message", .string(error.message)),
                ]))
            return 1
        }
    }

    static func report(_ notification: VerifiedNotification) -> [(String, JSONValue)] {
        var members: [(String, JSONValue)] = [
            ("client_id", .string(notification.clientID)), ("sub", .string(notification.subject)),
            ("type", .string(notification.type.name)), ("raw_type", .string(notification.rawType)),
            ("event_time_ms", .integer(notification.eventTimeMilliseconds)), ("jti", .string(notification.tokenID)),
            ("iat", .integer(notification.issuedAt)), ("exp", notification.expiresAt.map { .integer($0) } ?? .null),
        ]
        if notification.type.isEmailEvent {
            members.append(("email", notification.email.map { .string($0) } ?? .null))
            members.append(("is_private_email", notification.isPrivateEmail.map { .bool($0) } ?? .null))
        }
        return members
    }
}
