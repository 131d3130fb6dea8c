import Foundation
import SIWAHTTPS
import SIWAJSON
import SIWARedis
import SIWAServer
import SIWASupport
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
        error (invalid_client included); 3 Redis did not answer (rerun: checked users are
        skipped).

        settings (SIWA_* environment variables; the environment wins over --env-file):
        \(ReconcileConfiguration.helpLines.joined(separator: "\n"))
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
        return Run(configuration: configuration, rate: rate, json: arguments.wantsJSON).reconcile(file)
    }

    /// `--rate` (reconcile's and revoke's): requests per second within `allowedRates`, 5 by default.
    /// The client every command that calls Apple's token endpoints uses (reconcile, revoke,
    /// canary, transfer): the team's client secret, the CA file and timeout, the retries, and
    /// `pacer` before every request.
    static func appleClient(_ configuration: ReconcileConfiguration, pacer: RequestPacer) -> AppleTokenCheck {
        AppleTokenCheck(
            tokenURL: configuration.tokenURL,
            secret: AppleClientSecret(
                teamID: configuration.teamID, keyID: configuration.keyID, key: configuration.privateKey),
            fetcher: HTTPSFetcher(
                caFilePath: configuration.caFile, timeoutSeconds: Double(configuration.timeoutSeconds)),
            attempts: configuration.attempts, retryDelayMilliseconds: configuration.retryDelayMilliseconds,
            pacer: pacer)
    }

    /// The pacer of `--rate` requests a second; each wait Apple asks for with a `429` is one
    /// `apple_asked_to_wait` line, so a long pause is never silent.
    static func pacer(rate: Double) -> RequestPacer {
        RequestPacer(interval: .seconds(1 / rate)) { hold in
            EventLog.event("apple_asked_to_wait", level: "warning", [("wait_ms", .integer(hold.wholeMilliseconds))])
        }
    }

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
    static func loadConfiguration(_ arguments: CommandLineArguments) -> ReconcileConfiguration? {
        OperatorSettings.load(ReconcileConfiguration.self, envFile: arguments.value("--env-file"))
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

/// One reconcile run: reads lines, checks users (a user checked in the last 24 hours is
/// skipped: a rerun resumes), and prints the counts.
private final class Run {
    let configuration: ReconcileConfiguration
    let store: ReconcileStore
    let check: AppleTokenCheck
    /// Malformed lines are skipped and a refused token is a decision: only an unknown user
    /// leaves the run unfinished.
    let batch = BatchRun(
        name: "reconcile", outcomes: ["still_valid", "refused", "skipped", "unknown", "malformed"],
        finished: ["still_valid", "refused", "skipped", "malformed"])

    /// The summary as one JSON object (`--json`), not the `reconcile:` line.
    let json: Bool

    init(configuration: ReconcileConfiguration, rate: Double, json: Bool) {
        self.configuration = configuration
        self.json = json
        store = ReconcileStore(
            connection: OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix),
            keyPrefix: configuration.keyPrefix, streamMaximumLength: configuration.streamMaximumLength)
        check = ReconcileCommand.appleClient(configuration, pacer: ReconcileCommand.pacer(rate: rate))
    }

    /// Users asked of Apple: every one not skipped or malformed.
    var checked: Int { ["still_valid", "refused", "unknown"].map { batch.counts[$0] ?? 0 }.reduce(0, +) }

    func reconcile(_ file: UnsafeMutablePointer<FILE>) -> ExitStatus {
        EventLog.event(
            "reconcile_started",
            [("token_url", .string(configuration.tokenURL)), ("team_id", .string(configuration.teamID))])
        do {
            try batch.checkRedisAnswers(store.connection)
            try InputLines.each(file) { bytes, lineNumber throws(BatchRun.Stop) in
                try process(bytes, lineNumber: lineNumber)
            }
        } catch {
            finish()
            return batch.stopped(error)
        }
        finish()
        return batch.status
    }

    /// Handles one non-blank line; throws when the run must stop.
    private func process(_ bytes: [UInt8], lineNumber: Int) throws(BatchRun.Stop) {
        let user: ReconcileLine
        do {
            user = try ReconcileLine(parsing: bytes)
        } catch {
            batch.log(
                "reconcile_line_malformed", level: "warning",
                [("line", .integer(Int64(lineNumber))), ("reason", .string(error.code))])
            batch.count("malformed")
            return
        }
        // The input line names the user; the log never does (no `sub`: see the privacy table).
        let identity: [(String, JSONValue)] = [
            ("line", .integer(Int64(lineNumber))), ("client_id", .string(user.clientID)),
        ]
        do {
            if try store.wasCheckedRecently(clientID: user.clientID, subject: user.subject) {
                batch.count("skipped")
                return
            }
            let verdict = check.check(clientID: user.clientID, refreshToken: user.refreshToken)
            let checkedAt = Int64(Date().timeIntervalSince1970 * 1000)
            switch verdict {
            case .valid:
                try store.record(clientID: user.clientID, subject: user.subject, refused: false, checkedAt: checkedAt)
                batch.count("still_valid")
            case .refused:
                let moved = try store.record(
                    clientID: user.clientID, subject: user.subject, refused: true, checkedAt: checkedAt)
                batch.log("reconcile_refused", identity + [("sessions_revoked_at_moved", .bool(moved))])
                batch.count("refused")
            case .unknown(let reason):
                batch.log("reconcile_unknown", level: "warning", identity + [("reason", .string(reason))])
                batch.count("unknown")
                if reason == "http_429" {
                    throw BatchRun.Stop(
                        status: .failed,
                        message: "Apple answered 429 (too many requests) \(AppleTokenCheck.throttledAttempts) times "
                            + "in a row at line \(lineNumber), each after its Retry-After: the run stopped; rerun later "
                            + "(checked users are skipped)")
                }
            case .configurationError(let code):
                batch.log("reconcile_client_refused", level: "error", identity + [("error", .string(code))])
                throw BatchRun.Stop(
                    status: .usage,
                    message: "Apple refused the client (\(code)) for client ID \(user.clientID) at line \(lineNumber): "
                        + "check SIWA_APPLE_TEAM_ID, SIWA_APPLE_KEY_ID, SIWA_APPLE_PRIVATE_KEY_FILE and the client ID")
            }
        } catch let error as RedisError {
            batch.log(
                "redis_error", level: "error",
                [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
            throw BatchRun.Stop(
                status: .unreachable,
                message: "Redis failed at line \(lineNumber) (\(error.code.rawValue)); the run stopped (a rerun "
                    + "skips the users already checked)")
        } catch let stop as BatchRun.Stop {
            throw stop
        } catch {
            throw BatchRun.Stop(status: .failed, message: "\(error)")
        }
    }

    /// The finished line, and the summary on standard output (`checked=` first).
    private func finish() {
        let checked: [(String, JSONValue)] = [("checked", .integer(Int64(self.checked)))]
        batch.finish("reconcile_finished", checked)
        if json {
            Output.json(checked + batch.countFields)
        } else {
            Output.line("reconcile: checked=\(self.checked) \(batch.summary)")
        }
    }
}
