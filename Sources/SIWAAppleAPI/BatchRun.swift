import Foundation
import SIWAJSON
import SIWARedis
import SIWASupport
import SIWATelemetry

#if canImport(Glibc)
    import Glibc
#endif

/// What the batch commands (`reconcile`, `revoke`, `transfer export`, `transfer import`)
/// share, written once: the count of each outcome, a progress line on standard error while
/// it is a terminal (cleared before any other line), the start check (Redis answers before
/// anything is asked of Apple), resumption (a user an earlier run finished is counted
/// `skipped` and not asked again: each command's store says which are), the stop with its
/// message and exit status, and the `<name>_finished` line with the counts.
public final class BatchRun {
    /// Ends a run early: the message goes to standard error, the status is the exit status.
    public struct Stop: Error {
        let status: ExitStatus
        let message: String

        public init(status: ExitStatus, message: String) {
            self.status = status
            self.message = message
        }
    }

    /// `reconcile`, `revoke`, `transfer export`: the command's words, for messages.
    let name: String
    /// Every outcome a user can have, in the order the finished line gives their counts.
    let outcomes: [String]
    /// The outcomes that leave a user done; any other one makes the run exit 1.
    let finished: Set<String>
    private(set) var counts: [String: Int]
    /// Users this run will ask (0: not known beforehand; progress then shows the counts).
    var toDo = 0
    private(set) var handled = 0
    private let output: CommandOutput
    private let started = ContinuousClock.now

    init(name: String, outcomes: [String], finished: Set<String>, output: CommandOutput) {
        self.name = name
        self.outcomes = outcomes
        self.finished = finished
        self.output = output
        counts = Dictionary(uniqueKeysWithValues: outcomes.map { ($0, 0) })
    }

    /// The users that did not end in a finished outcome.
    var unfinished: Int { counts.filter { !finished.contains($0.key) }.values.reduce(0, +) }

    /// Exit 0 when every user finished, 1 otherwise.
    var status: ExitStatus { unfinished > 0 ? .failed : .success }

    /// `outcome=count ...`, in the order of `outcomes`.
    var summary: String { outcomes.map { "\($0)=\(counts[$0] ?? 0)" }.joined(separator: " ") }

    /// Fails with exit 3 unless Redis answers: checked before the first request to Apple, so
    /// a run against a Redis that is down asks Apple nothing (no token revoked or exchanged
    /// whose result could not be recorded).
    func checkRedisAnswers(_ connection: RedisConnection) throws(Stop) {
        do {
            try connection.connect()
        } catch {
            log(
                "redis_error", level: "error",
                [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
            throw Stop(
                status: .unreachable,
                message: "Redis did not answer (\(error.code.rawValue)): nothing was asked of Apple; run it again "
                    + "once Redis answers")
        }
    }

    /// One more user with `outcome`; the progress line moves on (a user an earlier run
    /// finished, `skipped`, is not among `toDo`).
    func count(_ outcome: String) {
        counts[outcome, default: 0] += 1
        if outcome != "skipped" { handled += 1 }
        showProgress()
    }

    /// A user's result line on standard output (one JSON object), after the progress line is cleared.
    func report(_ fields: [(String, JSONValue)]) {
        clearProgress()
        output.json(fields)
    }

    /// One log line (standard error), after the progress line is cleared.
    func log(_ event: String, level: String = "info", _ fields: [(String, JSONValue)]) {
        clearProgress()
        EventLog.event(event, level: level, fields)
    }

    /// The `<event>` line with the counts of every outcome (a warning when a user did not
    /// finish), `extra` before them.
    func finish(_ event: String, _ extra: [(String, JSONValue)] = [], after: [(String, JSONValue)] = []) {
        clearProgress()
        EventLog.event(event, level: unfinished > 0 ? "warning" : "info", extra + countFields + after)
    }

    /// The count of each outcome, in the order of `outcomes`.
    var countFields: [(String, JSONValue)] { outcomes.map { ($0, .integer(Int64(counts[$0] ?? 0))) } }

    /// The run stopped: its message on standard error; the status to exit with.
    func stopped(_ stop: Stop) -> ExitStatus {
        clearProgress()
        output.error("siwa-endpoint \(name): \(stop.message)")
        return stop.status
    }

    private func clearProgress() {
        if output.showsProgress { output.progress("\r\u{1B}[K") }
    }

    private func showProgress() {
        guard output.showsProgress else { return }
        guard toDo > 0 else {
            output.progress("\r\u{1B}[K\(name): \(summary)")
            return
        }
        let elapsed = Double((ContinuousClock.now - started).components.seconds)
        let left = Int(elapsed / Double(max(1, handled)) * Double(max(0, toDo - handled)))
        let estimate = left >= 3600 ? "\(left / 3600)h\(left % 3600 / 60)m" : "\(left / 60)m\(left % 60)s"
        output.progress("\r\u{1B}[K\(name): \(handled)/\(toDo), about \(estimate) left")
    }
}
