import Foundation
import SIWAAppleAPI
import SIWAHTTPS
import SIWAJSON
import SIWASettingKeys
import SIWASettings
import SIWAStore
import SIWASupport
import SIWATelemetry

#if canImport(Glibc)
    import Glibc
#endif

/// `revoke FILE`: revokes users' tokens at Apple's `/auth/revoke`, for the app's own
/// account-deletion flow (App Store Review Guideline 5.1.1(v)), and ends those users'
/// sessions in Redis at the revoke time. See docs/operations.md, "Revoke: ending a user's tokens at Apple".
enum RevokeCommand {
    static let help = """
        usage: siwa-endpoint revoke [--env-file FILE] [--rate N] [--json] FILE

        FILE (or - for standard input): one user per line,
          {"client_id": "...", "sub": "...", "refresh_token": "..."}
        or with "access_token" instead (a refresh token is preferred when both are given).
        Tokens are read from the input only: never put one on the command line.

        For each user, posts the token to Apple's revocation endpoint with a fresh ES256
        client secret, and prints one JSON line: {"line","client_id","sub","outcome"}
        with outcome revoked, refused (with Apple's "error" code) or unknown (with a
        "reason", after the retries: 5xx, timeouts, ten 429s in a row, each 429 waited out
        for its Retry-After; ten 429s in a row also stop the run, that user's line
        printed). A revoked user's sessions end at
        the revoke time (sessions_revoked_at only moves forward), with a stream entry and
        a message of type app-revoked-tokens (source revoke, not Apple-signed).
        400 invalid_client: a configuration error, the run stops at once. The lines are
        JSON with or without --json (accepted, as by every command that reports).

        --rate N   at most N requests per second (default 5; from 0.01 to 100)

        Exit status (the table of every command: docs/operations.md, "Exit status"):
        0 every user revoked; 1 some user refused, unknown or malformed; 2 a configuration
        or usage error (invalid_client included); 3 Redis did not answer (at the start:
        nothing was asked of Apple).

        settings: those of reconcile (see `siwa-endpoint reconcile --help`), and
          SIWA_APPLE_REVOKE_URL (default: \(AppleTokenRevocation.defaultRevokeURL))
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file", "--rate"], flagOptions: [CommandLineArguments.json])
        guard arguments.positionals.count == 1, let input = arguments.positionals.first else {
            throw UsageError("revoke takes one FILE (or - for standard input); tokens are never arguments")
        }
        let rate = try ReconcileCommand.rate(arguments)
        guard let configuration = ReconcileCommand.loadConfiguration(arguments),
            let file = ReconcileCommand.openInput(input, command: "revoke")
        else { return .usage }
        defer { fclose(file) }
        return RevokeRun(
            settings: configuration.runSettings, revocation: configuration.revocation(rate: rate), output: .standard,
            connection: OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix)
        ).revoke(file)
    }
}
