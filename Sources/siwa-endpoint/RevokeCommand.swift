import Foundation
import SIWAAppleAPI
import SIWAHTTPS
import SIWAJSON
import SIWASettingKeys
import SIWASettings
import SIWAStore
import SIWATelemetry

#if canImport(Glibc)
    import Glibc
#endif

/// `revoke FILE`: revokes users' tokens at Apple's `/auth/revoke`, for the app's own
/// account-deletion flow (App Store Review Guideline 5.1.1(v)), and ends those users'
/// sessions in Redis at the revoke time. See docs/operations.md, "Revoke: ending a user's tokens at Apple".
enum RevokeCommand {
    static let help = """
        usage: siwa-endpoint revoke [--env-file FILE] [--rate N] FILE

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
        400 invalid_client: a configuration error, the run stops at once.

        --rate N   at most N requests per second (default 5; from 0.01 to 100)

        Exit status: 0 every user revoked; 1 some user refused, unknown or malformed, or
        Redis failed; 2 a configuration or usage error (invalid_client included).

        settings: those of reconcile (see `siwa-endpoint reconcile --help`), and
          SIWA_APPLE_REVOKE_URL (default: \(AppleTokenRevocation.defaultRevokeURL))
        """

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(words, valueOptions: ["--env-file", "--rate"])
        guard arguments.positionals.count == 1, let input = arguments.positionals.first else {
            throw UsageError("revoke takes one FILE (or - for standard input); tokens are never arguments")
        }
        let rate = try ReconcileCommand.rate(arguments)
        guard let configuration = ReconcileCommand.loadConfiguration(arguments),
            let file = ReconcileCommand.openInput(input, command: "revoke")
        else { return 2 }
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
    var counts: [String: Int] = ["revoked": 0, "refused": 0, "unknown": 0, "malformed": 0]
    let store: ReconcileStore
    let revocation: AppleTokenRevocation
    let configuration: ReconcileConfiguration

    init(configuration: ReconcileConfiguration, rate: Double) {
        self.configuration = configuration
        store = ReconcileStore(
            connection: OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix),
            keyPrefix: configuration.keyPrefix, streamMaximumLength: configuration.streamMaximumLength)
        revocation = RevokeCommand.revocation(configuration, rate: rate)
    }

    func revoke(_ file: UnsafeMutablePointer<FILE>) -> Int32 {
        EventLog.event(
            "revoke_started",
            [("revoke_url", .string(configuration.revokeURL)), ("team_id", .string(configuration.teamID))])
        let stopped = InputLines.each(file, failed: { stop("reading the input failed at line \($0)", status: 1) }) {
            bytes, lineNumber in process(bytes, lineNumber: lineNumber)
        }
        if let stopped { return stopped }
        finish()
        return counts["revoked"] == counts.values.reduce(0, +) ? 0 : 1
    }

    /// One user; returns an exit status when the run must stop.
    private func process(_ bytes: [UInt8], lineNumber: Int) -> Int32? {
        let user: RevokeLine
        do {
            user = try RevokeLine(parsing: bytes)
        } catch {
            counts["malformed", default: 0] += 1
            EventLog.event(
                "revoke_line_malformed", level: "warning",
                [("line", .integer(Int64(lineNumber))), ("reason", .string(error.code))])
            return nil
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
                counts["revoked", default: 0] += 1
                result += [
                    ("outcome", .string("revoked")), ("revoked_at", .integer(revokedAt)),
                    ("sessions_revoked_at_moved", .bool(moved)),
                ]
            } catch {
                // Apple revoked the token; Redis does not know yet. Said on the user's line,
                // so a rerun of that line (a 200 again) records it.
                result += [("outcome", .string("revoked")), ("recorded", .bool(false))]
                Output.line(JSONWriter.object(result))
                EventLog.event(
                    "redis_error", level: "error",
                    [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
                return stop(
                    "Redis failed at line \(lineNumber) (\(error.code.rawValue)) after Apple revoked the token: "
                        + "run that line again once Redis answers; the run stopped", status: 1)
            }
        case .refused(let code):
            counts["refused", default: 0] += 1
            result += [("outcome", .string("refused")), ("error", .string(code))]
        case .unknown(let reason):
            counts["unknown", default: 0] += 1
            result += [("outcome", .string("unknown")), ("reason", .string(reason))]
            if reason == "http_429" {
                // Every next user would meet the same, at a pace halved each time.
                Output.line(JSONWriter.object(result))
                return stop(
                    "Apple answered 429 (too many requests) \(AppleTokenCheck.throttledAttempts) times in a row at "
                        + "line \(lineNumber), each after its Retry-After: the run stopped; run this line and the "
                        + "ones after it again later", status: 1)
            }
        case .configurationError(let code):
            EventLog.event(
                "revoke_client_refused", level: "error",
                [
                    ("line", .integer(Int64(lineNumber))), ("client_id", .string(user.clientID)),
                    ("error", .string(code)),
                ])
            return stop(
                "Apple refused the client (\(code)) for client ID \(user.clientID) at line \(lineNumber): "
                    + "check SIWA_APPLE_TEAM_ID, SIWA_APPLE_KEY_ID, SIWA_APPLE_PRIVATE_KEY_FILE and the client ID",
                status: 2)
        }
        Output.line(JSONWriter.object(result))
        return nil
    }

    private func stop(_ message: String, status: Int32) -> Int32 {
        finish()
        Output.error("siwa-endpoint revoke: \(message)")
        return status
    }

    private func finish() {
        let names = ["revoked", "refused", "unknown", "malformed"]
        let unfinished = (counts["refused"] ?? 0) + (counts["unknown"] ?? 0) + (counts["malformed"] ?? 0)
        EventLog.event(
            "revoke_finished", level: unfinished > 0 ? "warning" : "info",
            names.map { ($0, .integer(Int64(counts[$0] ?? 0))) })
    }
}
