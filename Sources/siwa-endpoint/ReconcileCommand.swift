import Foundation
import SIWAAppleAPI
import SIWAHTTPS
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWAVerification
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `reconcile FILE`: asks Apple's token endpoint, once a day per user, whether each
/// user's refresh token is still honoured, and ends the sessions of users whose token
/// is refused (a revocation no notification brought). See docs/operations.md, "Reconcile: revocations no notification brought".
enum ReconcileCommand {
    static let help = """
        usage: siwa-endpoint reconcile [--env-file FILE] [--rate N] [--json] FILE

        FILE (or - for standard input): one user per line,
          {"client_id": "...", "sub": "...", "refresh_token": "..."}
        For each user not checked in the last 24 hours, posts the refresh token to
        Apple's token endpoint with a fresh ES256 client secret. 200: still valid.
        400 invalid_grant: refused, and the user's sessions_revoked_at moves to the
        check time. 5xx, timeouts: retried, then unknown. 429: every request waits for
        its Retry-After, the pace halves, the user is asked again (ten in a row: unknown,
        and the run stops: Apple would answer the next users the same).
        400 invalid_client: a configuration error, the run stops.

        --rate N   at most N requests per second (default 5; from 0.01, one request
                   every 100 seconds, to 100)
        --json     the summary as one JSON object ({"checked","still_valid","refused",
                   "skipped","unknown","malformed"}) instead of the `reconcile:` line

        Exit status (the table of every command: docs/operations.md, "Exit status"):
        0 every line decided or skipped; 1 some user unknown; 2 a configuration or usage
        error (invalid_client included); 3 Redis did not answer (checked at the start, before
        Apple is asked; rerun: checked users are skipped).

        settings (SIWA_* environment variables; the environment wins over --env-file):
        \(AppleAPIConfiguration.helpLines.joined(separator: "\n"))
          SIWA_REDIS_URL, SIWA_REDIS_TIMEOUT_MS, SIWA_KEY_PREFIX, SIWA_STREAM_MAXLEN and the
          Sentinel settings (SIWA_REDIS_SENTINELS ...): as for serve
        """

    /// Requests per second `--rate` accepts: the slowest is one request every 100 seconds.
    static let allowedRates: ClosedRange<Double> = 0.01...100

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file", "--rate"], flagOptions: [CommandLineArguments.json])
        guard arguments.positionals.count == 1, let input = arguments.positionals.first else {
            throw UsageError("reconcile takes one FILE (or - for standard input)")
        }
        let rate = try self.rate(arguments)
        guard let configuration = loadConfiguration(arguments),
            let file = openInput(input, command: "reconcile")
        else { return .usage }
        defer { fclose(file) }
        return ReconcileRun(
            settings: configuration.runSettings, check: configuration.appleClient(rate: rate),
            json: arguments.wantsJSON,
            output: .standard,
            connection: OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix)
        ).reconcile(file)
    }

    /// `--rate` (reconcile's, revoke's, transfer's): requests per second within `allowedRates`, 5 by
    /// default.
    static func rate(_ arguments: CommandLineArguments) throws -> Double {
        guard let text = arguments.value("--rate") else { return 5 }
        guard let value = Double(text), allowedRates.contains(value) else {
            throw UsageError(
                "--rate must be a number of requests per second from \(allowedRates.lowerBound) to "
                    + "\(Int(allowedRates.upperBound)), got \(text)")
        }
        return value
    }

    /// The settings reconcile and revoke share, read as serve reads its own: a refusal is one
    /// `configuration_invalid` line naming the setting, by serve's one writer, and nothing else
    /// (nil: exit 2); unknown settings warned.
    static func loadConfiguration(_ arguments: CommandLineArguments) -> AppleAPIConfiguration? {
        OperatorSettings.load(AppleAPIConfiguration.self, envFile: arguments.value("--env-file"))
    }

    /// The users file (or standard input for `-`); nil: exit 2.
    static func openInput(_ input: String, command: String) -> UnsafeMutablePointer<FILE>? {
        guard let file = InputLines.open(input) else {
            Output.error("siwa-endpoint \(command): cannot read \(input)")
            return nil
        }
        return file
    }
}
