import Foundation
import SIWAAppleAPI
import SIWAHTTPS
import SIWAJSON
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
        usage: siwa-endpoint reconcile [--env-file FILE] [--rate N] FILE

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

        Exit status: 0 every line decided or skipped; 1 some user unknown (or Redis
        failed); 2 a configuration or usage error (invalid_client included).

        settings (SIWA_* environment variables; the environment wins over --env-file):
        \(ReconcileConfiguration.helpLines.joined(separator: "\n"))
          SIWA_REDIS_URL, SIWA_REDIS_TIMEOUT_MS, SIWA_KEY_PREFIX, SIWA_STREAM_MAXLEN and the
          Sentinel settings (SIWA_REDIS_SENTINELS ...): as for serve
        """

    /// Requests per second `--rate` accepts: the slowest is one request every 100 seconds.
    static let allowedRates: ClosedRange<Double> = 0.01...100

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(words, valueOptions: ["--env-file", "--rate"])
        guard arguments.positionals.count == 1, let input = arguments.positionals.first else {
            throw UsageError("reconcile takes one FILE (or - for standard input)")
        }
        let rate = try self.rate(arguments)
        guard let configuration = loadConfiguration(arguments),
            let file = openInput(input, command: "reconcile")
        else { return 2 }
        defer { fclose(file) }
        return Run(configuration: configuration, rate: rate).reconcile(file)
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
        let configuration: ReconcileConfiguration
        do {
            configuration = try ReconcileConfiguration(
                environment: ProcessInfo.processInfo.environment, envFile: arguments.value("--env-file"))
        } catch {
            ServeCommand.refuse(error)
            return nil
        }
        OperatorSettings.warnUnknown(configuration.unknownSettings)
        return configuration
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

/// One reconcile run: reads lines, checks users, keeps the counts.
private final class Run {
    struct Counts {
        var checked = 0
        var valid = 0
        var refused = 0
        var skipped = 0
        var unknown = 0
        var malformed = 0

        var summary: String {
            "checked=\(checked) still_valid=\(valid) refused=\(refused) skipped=\(skipped) unknown=\(unknown) malformed=\(malformed)"
        }
    }

    let configuration: ReconcileConfiguration
    let store: ReconcileStore
    let check: AppleTokenCheck
    let progress = isatty(2) == 1
    var counts = Counts()

    init(configuration: ReconcileConfiguration, rate: Double) {
        self.configuration = configuration
        store = ReconcileStore(
            connection: OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix),
            keyPrefix: configuration.keyPrefix, streamMaximumLength: configuration.streamMaximumLength)
        check = ReconcileCommand.appleClient(configuration, pacer: ReconcileCommand.pacer(rate: rate))
    }

    func reconcile(_ file: UnsafeMutablePointer<FILE>) -> Int32 {
        EventLog.event(
            "reconcile_started",
            [("token_url", .string(configuration.tokenURL)), ("team_id", .string(configuration.teamID))])
        let stopped = InputLines.each(
            file, failed: { stop("reading the input failed at line \($0)", status: 1) }
        ) { bytes, lineNumber in
            let status = process(bytes, lineNumber: lineNumber)
            if status == nil { showProgress() }
            return status
        }
        if let stopped { return stopped }
        finish()
        return counts.unknown > 0 ? 1 : 0
    }

    /// Handles one non-blank line; returns an exit status when the run must stop.
    private func process(_ bytes: [UInt8], lineNumber: Int) -> Int32? {
        let user: ReconcileLine
        do {
            user = try ReconcileLine(parsing: bytes)
        } catch {
            counts.malformed += 1
            log(
                "reconcile_line_malformed", level: "warning",
                [("line", .integer(Int64(lineNumber))), ("reason", .string(error.code))])
            return nil
        }
        // The input line names the user; the log never does (no `sub`: see the privacy table).
        let identity: [(String, JSONValue)] = [
            ("line", .integer(Int64(lineNumber))), ("client_id", .string(user.clientID)),
        ]
        do {
            if try store.wasCheckedRecently(clientID: user.clientID, subject: user.subject) {
                counts.skipped += 1
                return nil
            }
            let verdict = check.check(clientID: user.clientID, refreshToken: user.refreshToken)
            let checkedAt = Int64(Date().timeIntervalSince1970 * 1000)
            switch verdict {
            case .valid:
                counts.checked += 1
                counts.valid += 1
                try store.record(clientID: user.clientID, subject: user.subject, refused: false, checkedAt: checkedAt)
            case .refused:
                counts.checked += 1
                counts.refused += 1
                let moved = try store.record(
                    clientID: user.clientID, subject: user.subject, refused: true, checkedAt: checkedAt)
                log("reconcile_refused", identity + [("sessions_revoked_at_moved", .bool(moved))])
            case .unknown(let reason):
                counts.checked += 1
                counts.unknown += 1
                log("reconcile_unknown", level: "warning", identity + [("reason", .string(reason))])
                if reason == "http_429" {
                    return stop(
                        "Apple answered 429 (too many requests) \(AppleTokenCheck.throttledAttempts) times in a row "
                            + "at line \(lineNumber), each after its Retry-After: the run stopped; rerun later "
                            + "(checked users are skipped)", status: 1)
                }
            case .configurationError(let code):
                log("reconcile_client_refused", level: "error", identity + [("error", .string(code))])
                return stop(
                    "Apple refused the client (\(code)) for client ID \(user.clientID) at line \(lineNumber): "
                        + "check SIWA_APPLE_TEAM_ID, SIWA_APPLE_KEY_ID, SIWA_APPLE_PRIVATE_KEY_FILE and the client ID",
                    status: 2)
            }
        } catch {
            log(
                "redis_error", level: "error",
                [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
            return stop("Redis failed at line \(lineNumber) (\(error.code.rawValue)); the run stopped", status: 1)
        }
        return nil
    }

    private func stop(_ message: String, status: Int32) -> Int32 {
        finish()
        Output.error("siwa-endpoint reconcile: \(message)")
        return status
    }

    private func finish() {
        if progress { Output.progress("\r\u{1B}[K") }
        EventLog.event(
            "reconcile_finished", level: counts.unknown > 0 ? "warning" : "info",
            [
                ("checked", .integer(Int64(counts.checked))), ("still_valid", .integer(Int64(counts.valid))),
                ("refused", .integer(Int64(counts.refused))), ("skipped", .integer(Int64(counts.skipped))),
                ("unknown", .integer(Int64(counts.unknown))), ("malformed", .integer(Int64(counts.malformed))),
            ])
        Output.line("reconcile: \(counts.summary)")
    }

    private func log(_ name: String, level: String = "info", _ fields: [(String, JSONValue)]) {
        if progress { Output.progress("\r\u{1B}[K") }
        EventLog.event(name, level: level, fields)
    }

    private func showProgress() {
        guard progress else { return }
        Output.progress("\r\u{1B}[Kreconcile: \(counts.summary)")
    }
}
