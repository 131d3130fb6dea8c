/// What one `NotificationSpool.replay` did. It holds no record content, so the
/// caller can log it as is (except `stop`, which is the caller's own error).
public struct SpoolReplayReport<Stop: Error>: Sendable {
    /// Records taken out of the spool and committed by this replay: they will not be sent
    /// again. `steps` says what became of each.
    public var taken: Int
    /// How many records took each step (stored with an outcome, or rejected).
    public var steps: [SpoolReplayStep: Int] = [:]
    /// Torn or corrupt records moved to `.torn` files; log each one.
    public var torn: [SpoolTornRecord]
    /// What the record step threw: the replay stopped there, and that record and every
    /// later one stay in the spool for the next replay.
    public var stop: Stop?
    /// The spool's own failure (reading a segment, saving the position, deleting a segment):
    /// the replay stopped, and nothing was lost; at most the last applied record is sent again.
    public var spoolError: SpoolError?
    /// Records still waiting after this replay (including ones appended while it ran).
    public var remaining: Int

    public init(
        taken: Int, torn: [SpoolTornRecord], stop: Stop?, spoolError: SpoolError?, remaining: Int
    ) {
        self.taken = taken
        self.torn = torn
        self.stop = stop
        self.spoolError = spoolError
        self.remaining = remaining
    }

    /// Records that took `step`.
    public func count(_ step: SpoolReplayStep) -> Int { steps[step] ?? 0 }

    /// True when every record that was waiting when the replay began was stored or rejected.
    public var isComplete: Bool { stop == nil && spoolError == nil }
}
