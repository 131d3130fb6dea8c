import Foundation
import SIWAJSON
import SIWARedis
import SIWAStore
import SIWASupport
import SIWATelemetry

#if canImport(Glibc)
    import Glibc
#endif

/// One reconcile run: reads lines, checks users (a user checked in the last 24 hours is
/// skipped: a rerun resumes), and prints the counts.
public final class ReconcileRun {
    let settings: AppleRunSettings
    let store: ReconcileStore
    let check: AppleSignedPost
    /// Malformed lines are skipped and a refused token is a decision: only an unknown user
    /// leaves the run unfinished.
    let batch: BatchRun
    let output: CommandOutput

    /// The summary as one JSON object (`--json`), not the `reconcile:` line.
    let json: Bool

    /// `connection`: serve's Redis, found as serve finds it.
    public init(
        settings: AppleRunSettings, check: AppleSignedPost, json: Bool, output: CommandOutput,
        connection: RedisConnection
    ) {
        self.settings = settings
        self.json = json
        self.output = output
        batch = BatchRun(
            name: "reconcile", outcomes: ["still_valid", "refused", "skipped", "unknown", "malformed"],
            finished: ["still_valid", "refused", "skipped", "malformed"], output: output)
        store = ReconcileStore(
            connection: connection, keyPrefix: settings.keyPrefix, streamMaximumLength: settings.streamMaximumLength)
        self.check = check
    }

    /// Users asked of Apple: every one not skipped or malformed.
    var checked: Int { ["still_valid", "refused", "unknown"].map { batch.counts[$0] ?? 0 }.reduce(0, +) }

    /// Reads `file` to its end (or the run's stop); the exit status.
    public func reconcile(_ file: UnsafeMutablePointer<FILE>) -> ExitStatus {
        EventLog.event(
            "reconcile_started",
            [("token_url", .string(settings.tokenURL)), ("team_id", .string(settings.teamID))])
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
                        message: "Apple answered 429 (too many requests) \(AppleSignedPost.throttledAttempts) times "
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
            output.json(checked + batch.countFields)
        } else {
            output.line("reconcile: checked=\(self.checked) \(batch.summary)")
        }
    }
}
