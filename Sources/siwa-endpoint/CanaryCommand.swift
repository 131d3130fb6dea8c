import Foundation
import SIWAAppleAPI
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWAStore
import SIWASupport
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
                                    [--access-token] [--timeout SECONDS] [--env-file FILE] [--json]

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
        --json             one JSON document on standard output, whatever the outcome:
                           {"outcome","sub",...} with outcome arrived (revoked_at, applied_at,
                           seconds_to_applied), not_arrived, refused, unconfirmed,
                           client_refused, redis_unreachable or redis_lost; the messages
                           stay on standard error

        Redis is read first: when it does not answer, nothing is revoked (the token is kept).

        Exit status (the table of every command: docs/operations.md, "Exit status"):
        0 arrived; 1 nothing arrived in time (the registration or the network: it says what
        to check); 2 a usage or settings mistake (invalid_client: our client secret);
        3 Redis did not answer; 4 Apple refused or did not confirm the revocation.

        settings: those of reconcile and revoke (see `siwa-endpoint revoke --help`)
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file", "--client-id", "--sub", "--token-file", "--timeout"],
            flagOptions: ["--access-token", CommandLineArguments.json])
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
        guard let configuration = ReconcileCommand.loadConfiguration(arguments) else { return .usage }
        guard let token = readToken(tokenFile) else { return .usage }

        let kind: AppleTokenRevocation.TokenKind = arguments.has("--access-token") ? .accessToken : .refreshToken
        let run = CanaryRun(
            settings: configuration.runSettings, revocation: configuration.revocation(rate: 5), clientID: clientID,
            subject: subject, json: arguments.wantsJSON,
            output: .standard,
            connection: OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix))
        return run.run(token: token, kind: kind, timeout: timeout)
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
}
