import Synchronization

/// The last answer of each probe path (`/healthz`, `/healthz/live`, `/healthz/ready`), so
/// that a probe writes its request line only when its answer changes: a balancer or an
/// orchestrator asks every few seconds, and a not-ready instance wrote the same line each
/// time for as long as it lasted. Each path starts from "answered 200": a healthy probe
/// writes nothing, the first failing answer one line, each change of its reasons one
/// more, and the return to 200 one last line.
final class ProbeAnswerLog: Sendable {
    /// An answer as the line would describe it: the status and the line's own fields.
    struct Answer: Equatable {
        let status: Int
        let detail: String
    }

    private let last = Mutex<[String: Answer]>([:])

    /// The answer every path starts from.
    static let healthy = Answer(status: 200, detail: "")

    /// Records `answer` for `path`; the previous answer when it differs (a line is due),
    /// else nil.
    func change(path: String, to answer: Answer) -> Answer? {
        last.withLock { last in
            let previous = last[path] ?? Self.healthy
            guard previous != answer else { return nil }
            last[path] = answer
            return previous
        }
    }
}
