import Foundation
import SIWAJSON
import SIWARedis
import SIWAStore
import SIWASupport
import SIWATelemetry

#if canImport(Glibc)
    import Glibc
#endif

/// One revoke run: reads lines, revokes tokens, records what Apple accepted.
public final class RevokeRun {
    let store: ReconcileStore
    let revocation: AppleTokenRevocation
    let settings: AppleRunSettings
    let batch: BatchRun

    /// `connection`: serve's Redis, found as serve finds it.
    public init(
        settings: AppleRunSettings, revocation: AppleTokenRevocation, output: CommandOutput,
        connection: RedisConnection
    ) {
        self.settings = settings
        batch = BatchRun(
            name: "revoke", outcomes: ["revoked", "refused", "unknown", "malformed"], finished: ["revoked"],
            output: output)
        store = ReconcileStore(
            connection: connection, keyPrefix: settings.keyPrefix, streamMaximumLength: settings.streamMaximumLength)
        self.revocation = revocation
    }

    /// Reads `file` to its end (or the run's stop); the exit status.
    public func revoke(_ file: UnsafeMutablePointer<FILE>) -> ExitStatus {
        EventLog.event(
            "revoke_started",
            [("revoke_url", .string(settings.revokeURL)), ("team_id", .string(settings.teamID))])
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
                    message: "Apple answered 429 (too many requests) \(AppleSignedPost.throttledAttempts) times in a "
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
