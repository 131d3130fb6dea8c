import Foundation
import SIWACrypto
import SIWASupport
import SIWATestKit
import SIWAVerification

/// `sign`: prints a request body exactly as Apple sends one, signed with a test key.
enum SignCommand {
    static let help = """
        usage: siwa-endpoint sign --key FILE --kid KID --type TYPE --sub SUB --client-id ID
                                  [--email E --private true|false] [--event-time MS]
                                  [--jti J] [--iat SECONDS] [--documented-shape]
                                  [--count N]
               siwa-endpoint sign --google --key FILE --kid KID --type TYPE --sub SUB
                                  --client-id ID [--jti J] [--iat SECONDS]
                                  [--reason R] [--state S] [--issuer URL]

        Prints {"payload":"<JWS>"} as Apple posts it: events as a JSON string,
        event_time in milliseconds, exp = iat + 86400, header {"kid","alg"}.
        --documented-shape gives Apple's documented form instead (events as an
        object, event_time in seconds). TYPE may be any string, including an
        unknown one. --iat defaults to now; --event-time to iat in milliseconds.
        --count N (at most 100000) prints N distinct bodies, one per line, for
        load tests: the Nth has sub SUB.N and its own random jti (no --jti).

        --google prints a Security Event Token as Google's Cross-Account
        Protection pushes it (the body itself, for Content-Type
        application/secevent+jwt): TYPE is sessions-revoked, tokens-revoked,
        token-revoked, account-disabled (--reason hijacking|bulk-account),
        account-enabled, account-credential-change-required, verification
        (--state S) or unknown; --issuer defaults to https://accounts.google.com/.
        """

    static let maximumCount: Int64 = 100_000

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words,
            valueOptions: [
                "--key", "--kid", "--type", "--sub", "--client-id", "--email", "--private", "--event-time", "--jti",
                "--iat", "--count", "--reason", "--state", "--issuer",
            ],
            flagOptions: ["--documented-shape", "--google"])
        let keyPath = try arguments.required("--key")
        guard let pem = FileManager.default.contents(atPath: keyPath) else {
            throw UsageError("cannot read --key \(keyPath)")
        }
        let key = TestSigningKey(
            keyID: try arguments.required("--kid"),
            privateKey: try RSAPrivateKey(pem: String(decoding: pem, as: UTF8.self)))

        var isPrivateEmail: Bool?
        switch arguments.value("--private") {
        case nil: isPrivateEmail = nil
        case "true": isPrivateEmail = true
        case "false": isPrivateEmail = false
        case let other?: throw UsageError("--private must be true or false, got \(other)")
        }
        let issuedAt = try arguments.integer("--iat") ?? Int64(Date().timeIntervalSince1970)
        if arguments.has("--google") { return try signSecurityEvent(arguments, key: key, issuedAt: issuedAt) }
        let count = try arguments.integer("--count")
        if let count {
            guard (1...maximumCount).contains(count) else {
                throw UsageError("--count must be between 1 and \(maximumCount), got \(count)")
            }
            guard arguments.value("--jti") == nil else { throw UsageError("--count gives each body its own jti") }
        }
        var notification = TestNotification(
            type: try arguments.required("--type"), subject: try arguments.required("--sub"),
            clientID: try arguments.required("--client-id"), email: arguments.value("--email"),
            isPrivateEmail: isPrivateEmail, eventTimeMilliseconds: try arguments.integer("--event-time"),
            tokenID: arguments.value("--jti"), issuedAt: issuedAt,
            shape: arguments.has("--documented-shape") ? .documented : .apple)
        guard let count else {
            Output.line(try notification.requestBody(signedWith: key))
            return .success
        }
        let subject = notification.subject
        var lines = ""
        for index in 1...count {
            notification.subject = "\(subject).\(index)"
            notification.tokenID = TestNotification.randomTokenID()
            lines += try notification.requestBody(signedWith: key) + "\n"
        }
        Output.write(lines)
        return .success
    }

    /// `--google`: one Security Event Token, printed as the body Google pushes.
    static func signSecurityEvent(_ arguments: CommandLineArguments, key: TestSigningKey, issuedAt: Int64) throws
        -> ExitStatus
    {
        let typeName = try arguments.required("--type")
        guard let type = SecurityEventType(rawValue: typeName) else {
            throw UsageError(
                "--type must be one of \(SecurityEventType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        Output.line(
            try TestSecurityEvent.token(
                type, clientID: try arguments.required("--client-id"), sub: try arguments.required("--sub"),
                issuedAt: issuedAt, tokenID: arguments.value("--jti") ?? TestNotification.randomTokenID(), key: key,
                reason: arguments.value("--reason"), state: arguments.value("--state"),
                issuer: arguments.value("--issuer") ?? TestSecurityEvent.issuer))
        return .success
    }
}
