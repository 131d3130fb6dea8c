import Foundation
import SIWAHTTPS
import SIWAJSON
import SIWAServer
import SIWASupport

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
        or usage error (invalid_client included); 3 Redis did not answer.

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
        return RevokeRun(configuration: configuration, rate: rate).revoke(file)
    }
}

extension RevokeCommand {
    /// Apple's `/auth/revoke` with the configured client secret, paced to `rate` per second
    /// (`revoke` and `canary` alike).
    static func revocation(_ configuration: ReconcileConfiguration, rate: Double) -> AppleTokenRevocation {
        AppleTokenRevocation(
            revokeURL: configuration.revokeURL,
            client: ReconcileCommand.appleClient(configuration, pacer: ReconcileCommand.pacer(rate: rate)))
    }
}

/// One revoke run: reads lines, revokes tokens, records what Apple accepted.
private final class RevokeRun {
    let store: ReconcileStore
    let revocation: AppleTokenRevocation
    let configuration: ReconcileConfiguration
    let batch = BatchRun(
        name: "revoke", outcomes: ["revoked", "refused", "unknown", "malformed"], finished: ["revoked"])

    init(configuration: ReconcileConfiguration, rate: Double) {
        self.configuration = configuration
        store = ReconcileStore(
            connection: OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix),
            keyPrefix: configuration.keyPrefix, streamMaximumLength: configuration.streamMaximumLength)
        revocation = RevokeCommand.revocation(configuration, rate: rate)
    }

    func revoke(_ file: UnsafeMutablePointer<FILE>) -> ExitStatus {
        EventLog.event(
            "revoke_started",
            [("revoke_url", .string(configuration.revokeURL)), ("team_id", .string(configuration.teamID))])
        do {
            // Before any token is revoked: a revocation Redis could not record would leave
            // sessions Apple ended still valid here.
            try batch.checkRedisAnswers(store.connection)
            try InputLines.each(file) { bytes, lineNumber throws(BatchRun.Stop) in
                try process(bytes, lineNumber: lineNumber)
            }
        } catch {
            batch.finish("revoke_finished")
            return batch.stopped(error)
        }
        batch.finish("revoke_finished")
        return batch.status
    }

    /// One user; throws when the run must stop.
    private func process(_ bytes: [UInt8], lineNumber: Int) throws(BatchRun.Stop) {
        let user: RevokeLine
        do {
            user = try RevokeLine(parsing: bytes)
        } catch {
            batch.log(
                "revoke_line_malformed", level: "warning",
                [("line", .integer(Int64(lineNumber))), ("reason", .string(error.code))])
            batch.count("malformed")
            return
        }
        let verdict = revocation.revoke(clientID: user.clientID, token: user.token, kind: user.kind)
        let revokedAt = Int64(Date().timeIntervalSince1970 * 1000)
        var result: [(String, JSONValue)] = [
            ("line", .integer(Int64(lineNumber))), ("client_id", .string(user.clientID)),
            ("sub", .string(user.subject)),
        ]
        switch verdict {
        case .revoked:
            do {
                let moved = try store.recordRevocation(
                    clientID: user.clientID, subject: user.subject, revokedAt: revokedAt)
                result += [
                    ("outcome", .string("revoked")), ("revoked_at", .integer(revokedAt)),
                    ("sessions_revoked_at_moved", .bool(moved)),
                ]
            } catch {
                // Apple revoked the token; Redis does not know yet. Said on the user's line,
                // so a rerun of that line (a 200 again) records it.
                batch.report(result + [("outcome", .string("revoked")), ("recorded", .bool(false))])
                batch.log(
                    "redis_error", level: "error",
                    [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
                throw BatchRun.Stop(
                    status: .unreachable,
                    message: "Redis failed at line \(lineNumber) (\(error.code.rawValue)) after Apple revoked the "
                        + "token: run that line again once Redis answers; the run stopped")
            }
        case .refused(let code):
            result += [("outcome", .string("refused")), ("error", .string(code))]
        case .unknown(let reason):
            result += [("outcome", .string("unknown")), ("reason", .string(reason))]
            if reason == "http_429" {
                // Every next user would meet the same, at a pace halved each time.
                batch.report(result)
                batch.count("unknown")
                throw BatchRun.Stop(
                    status: .failed,
                    message: "Apple answered 429 (too many requests) \(AppleTokenCheck.throttledAttempts) times in a "
                        + "row at line \(lineNumber), each after its Retry-After: the run stopped; run this line and "
                        + "the ones after it again later")
            }
        case .configurationError(let code):
            batch.log(
                "revoke_client_refused", level: "error",
                [
                    ("line", .integer(Int64(lineNumber))), ("client_id", .string(user.clientID)),
                    ("error", .string(code)),
                ])
            throw BatchRun.Stop(
                status: .usage,
                message: "Apple refused the client (\(code)) for client ID \(user.clientID) at line \(lineNumber): "
                    + "check SIWA_APPLE_TEAM_ID, SIWA_APPLE_KEY_ID, SIWA_APPLE_PRIVATE_KEY_FILE and the client ID")
        }
        batch.report(result)
        batch.count(verdict.outcome)
    }
}

extension AppleTokenRevocation.Verdict {
    /// The outcome a run counts (and prints on the user's line).
    fileprivate var outcome: String {
        switch self {
        case .revoked: "revoked"
        case .refused: "refused"
        case .unknown: "unknown"
        case .configurationError: "configuration_error"
        }
    }
}
