/// What one `NotificationSpool.replay` did. It holds no record content, so the
/// caller can log it as is (except `applyError`, which is the caller's own error).
public struct SpoolReplayReport: Sendable {
    /// Records taken out of the spool and committed by this replay: they will not be sent
    /// again. `outcomes` says what became of each (Redis's outcome, or "set_aside").
    public var applied: Int
    /// How many records got each label `apply` returned.
    public var outcomes: [String: Int] = [:]
    /// Torn or corrupt records moved to `.torn` files; log each one.
    public var setAside: [SpoolSetAside]
    /// What `apply` threw: the replay stopped there, and that record and every later one
    /// stay in the spool for the next replay.
    public var applyError: (any Error)?
    /// The spool's own failure (reading a segment, saving the position, deleting a segment):
    /// the replay stopped, and nothing was lost; at most the last applied record is sent again.
    public var spoolError: SpoolError?
    /// Records still waiting after this replay (including ones appended while it ran).
    public var remaining: Int

    public init(
        applied: Int, setAside: [SpoolSetAside], applyError: (any Error)?, spoolError: SpoolError?, remaining: Int
    ) {
        self.applied = applied
        self.setAside = setAside
        self.applyError = applyError
        self.spoolError = spoolError
        self.remaining = remaining
    }

    /// True when every record that was waiting when the replay began was applied or set aside.
    public var isComplete: Bool { applyError == nil && spoolError == nil }
}
