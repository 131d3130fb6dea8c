import SIWAJSON

/// Where a run writes (standard output, standard error, the progress line): handed in, so
/// the runs of `reconcile`, `revoke`, `transfer` and `canary` write through the command's one
/// writer (`Output`) in the binary, and into memory in a test that runs them in process.
public struct CommandOutput: Sendable {
    /// One line of the report (standard output).
    let line: @Sendable (String) -> Void
    /// One message line (standard error).
    let error: @Sendable (String) -> Void
    /// Text rewritten in place on standard error (the progress line).
    let progress: @Sendable (String) -> Void
    /// Whether to draw the progress line (standard error is a terminal).
    let showsProgress: Bool

    public init(
        line: @escaping @Sendable (String) -> Void, error: @escaping @Sendable (String) -> Void,
        progress: @escaping @Sendable (String) -> Void = { _ in }, showsProgress: Bool = false
    ) {
        self.line = line
        self.error = error
        self.progress = progress
        self.showsProgress = showsProgress
    }

    /// One JSON object on one line of the report.
    public func json(_ members: [(String, JSONValue)]) {
        line(JSONWriter.object(members))
    }
}
