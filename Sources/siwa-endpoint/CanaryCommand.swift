import Foundation
import SIWAAppleAPI
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWAStore
import SIWAVerification

#if canImport(Glibc)
    import Glibc
#endif

/// `canary`: a real, Apple-signed notification on demand. Apple has no test-notification
/// API, but revoking a user's token makes it send a `consent-revoked` for that user
/// (TN3194): the canary spends a test user's sign-in to prove, end to end, that Apple
/// reaches this endpoint and that the endpoint verifies and applies what it sends.
enum CanaryCommand {
    static let help = """
        usage: siwa-endpoint canary --client-id ID --sub SUB --token-file FILE
                                    [--access-token] [--timeout SECONDS] [--env-file FILE]

        Revokes a test user's refresh token at Apple (/auth/revoke, with the configured
        client secret, as `revoke` does), then waits until the endpoint has verified and
        applied the consent-revoked Apple sends for that user (the user hash's
        consent_revoked_at changes in Redis), and prints the time from the revocation to
        the endpoint's receipt. Run it as the last step of registering the URL with Apple,
        and after every certificate renewal or nginx change.

        It SPENDS the test sign-in: the token is revoked for good, and the next run needs
        a fresh one (sign the test Apple Account in to the app again).

        --token-file FILE  the token (first line), or - for standard input; never an argument
        --access-token     the token is an access token (default: a refresh token)
        --timeout SECONDS  how long to wait for the notification (default 120, 5 to 3600)

        Redis is read first: when it does not answer, nothing is revoked (the token is kept).

        Exit status: 0 arrived; 1 nothing arrived in time (the registration or the network:
        it says what to check); 2 a usage or settings mistake; 3 Apple refused or did not
        confirm the revocation (invalid_client: our client secret); 4 Redis unreachable.

        settings: those of reconcile and revoke (see `siwa-endpoint revoke --help`)
        """

    enum Exit: Int32 {
        case arrived = 0
        case nothingArrived = 1
        case usage = 2
        case appleRefused = 3
        case redisUnreachable = 4
    }

    /// How often Redis is read while waiting.
    static let pollInterval: Duration = .milliseconds(250)

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file", "--client-id", "--sub", "--token-file", "--timeout"],
            flagOptions: ["--access-token"])
        guard arguments.positionals.isEmpty else {
            throw UsageError(
                "canary takes no positional arguments; the token comes from --token-file, never the command line")
        }
        guard let clientID = arguments.value("--client-id"), UserKeyPart.isValidClientID(clientID) else {
            throw UsageError("--client-id is required (a client ID of \(SettingKey.clientIDs.name))")
        }
        guard let subject = arguments.value("--sub"), UserKeyPart.isValidSubject(subject) else {
            throw UsageError("--sub is required (the test user's sub)")
        }
        guard let tokenFile = arguments.value("--token-file") else {
            throw UsageError("--token-file FILE (or - for standard input) is required; a token is never an argument")
        }
        let timeout = try arguments.integer("--timeout") ?? 120
        guard (5...3600).contains(timeout) else { throw UsageError("--timeout must be 5 to 3600 seconds") }
        guard let configuration = ReconcileCommand.loadConfiguration(arguments) else { return Exit.usage.rawValue }
        guard let token = readToken(tokenFile) else { return Exit.usage.rawValue }

        let connection = OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix)
        let userKey = RedisKeyLayout(prefix: configuration.keyPrefix).user(clientID: clientID, subject: subject)
        let before: [String: String]
        do {
            before = try userHash(connection, userKey)
        } catch {
            Output.error(
                "siwa-endpoint canary: Redis does not answer (\(error.code.rawValue): \(error.operatorMessage)); "
                    + "nothing was revoked, the token is kept")
            return Exit.redisUnreachable.rawValue
        }

        let revokedAt = Int64(Date().timeIntervalSince1970 * 1000)
        let started = ContinuousClock.now
        let kind: AppleTokenRevocation.TokenKind = arguments.has("--access-token") ? .accessToken : .refreshToken
        switch RevokeCommand.revocation(configuration, rate: 5).revoke(clientID: clientID, token: token, kind: kind) {
        case .revoked:
            Output.line("revoked at Apple at \(isoTime(revokedAt)); waiting up to \(timeout) s for its consent-revoked")
        case .configurationError(let code):
            Output.error(
                "siwa-endpoint canary: Apple refused our client (\(code)): check \(SettingKey.appleTeamID.name), "
                    + "\(SettingKey.appleKeyID.name), \(SettingKey.applePrivateKeyFile.name) and that \(clientID) belongs to that team; "
                    + "nothing was revoked")
            return Exit.appleRefused.rawValue
        case .refused(let code):
            Output.error(
                "siwa-endpoint canary: Apple refused the revocation (\(code)): the token is not one Apple "
                    + "issued to \(clientID), or is already spent; get a fresh one")
            return Exit.appleRefused.rawValue
        case .unknown(let reason):
            Output.error(
                "siwa-endpoint canary: Apple did not confirm the revocation (\(reason)): the token may or may "
                    + "not be spent; check SIWA_APPLE_REVOKE_URL and the outbound HTTPS route")
            return Exit.appleRefused.rawValue
        }

        let deadline = started + .seconds(timeout)
        var lastError: RedisError?
        var everRead = false
        while true {
            do {
                let now = try userHash(connection, userKey)
                everRead = true
                lastError = nil
                if let revoked = now["consent_revoked_at"], revoked != before["consent_revoked_at"] {
                    return arrived(now, revokedAt: revokedAt, seen: ContinuousClock.now - started, subject: subject)
                }
            } catch {
                lastError = error
            }
            if ContinuousClock.now >= deadline { break }
            Thread.sleep(forTimeInterval: pollInterval.inSeconds)
        }
        if let lastError, !everRead {
            Output.error(
                "siwa-endpoint canary: Redis stopped answering after the revocation (\(lastError.code.rawValue)); "
                    + "whether the notification arrived is unknown: `siwa-endpoint user \(clientID) \(subject)` "
                    + "once Redis answers")
            return Exit.redisUnreachable.rawValue
        }
        Output.error(
            """
            siwa-endpoint canary: no consent-revoked for \(subject) was applied within \(timeout) s of the revocation. Check:
              - the Server-to-Server Notification Endpoint registered with Apple for the primary App ID of \(clientID)'s group: this URL, exactly
              - that SIWA_CLIENT_IDS lists \(clientID) (the log's aud_not_served lines name a refused aud)
              - the certificate (`scripts/check-endpoint URL`: chain, expiry, ATS suites)
              - the firewall: Apple's posts must reach nginx (its access log shows each POST)
              - the endpoint's own log and `siwa-endpoint status`
            The token is spent: the next run needs a fresh sign-in.
            """)
        return Exit.nothingArrived.rawValue
    }

    /// The consent-revoked is in: prints the times and returns 0.
    static func arrived(_ hash: [String: String], revokedAt: Int64, seen: Duration, subject: String) -> Int32 {
        var fields: [(String, JSONValue)] = [("outcome", .string("arrived")), ("sub", .string(subject))]
        fields.append(("revoked_at", .integer(revokedAt)))
        if let received = hash["updated_at"].flatMap({ Int64($0) }) {
            fields.append(("applied_at", .integer(received)))
            fields.append(("seconds_to_applied", .number(Double(max(0, received - revokedAt)) / 1000)))
            Output.line(
                "consent-revoked for \(subject) applied \(String(format: "%.2f", Double(max(0, received - revokedAt)) / 1000)) s "
                    + "after the revocation (received \(isoTime(received)); seen in Redis after "
                    + "\(String(format: "%.2f", seen.inSeconds)) s)")
        }
        Output.line(JSONWriter.object(fields))
        return Exit.arrived.rawValue
    }

    /// The first line of the file (or standard input), trimmed; nil after saying why.
    static func readToken(_ path: String) -> String? {
        let data: Data?
        if path == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            data = FileManager.default.contents(atPath: path)
        }
        guard let data else {
            Output.error("siwa-endpoint canary: cannot read --token-file \(path)")
            return nil
        }
        let line = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).first.map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        guard let line, !line.isEmpty else {
            Output.error("siwa-endpoint canary: --token-file \(path) holds no token")
            return nil
        }
        return line
    }

    static func userHash(_ connection: RedisConnection, _ key: String) throws(RedisError) -> [String: String] {
        try StoreReader(connection: connection).hash(key)
    }

    static func isoTime(_ milliseconds: Int64) -> String {
        ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }
}
