/// Which records a failed fsync cut from the segment they were written to, kept for as
/// long as a writer of those records can still ask.
///
/// A writer's record is durable once an fsync that began after its write succeeded, or
/// once its segment was closed (closing fsyncs first). A failed fsync cuts every record
/// written since the last good one, and closes the segment too: so "closed" alone does not
/// say durable, and each writer of a cut record must learn of the cut before it answers.
/// The cut is therefore remembered per opening of a segment (its generation) until the
/// last writer holding a record of that opening has settled: never dropped by count or
/// age, which could let a writer take a cut record for a durable one and answer 200.
/// What it holds is bounded by the writers in flight (one per worker).
struct SpoolCutRecords {
    /// Writers that wrote a record in the opening and have not yet learnt its fate.
    private var unsettled: [UInt64: Int] = [:]
    /// Per opening, where the cut began and why.
    private var cuts: [UInt64: (from: Int, error: SpoolError)] = [:]

    /// A writer wrote a record in `generation` and will ask about it.
    mutating func issued(generation: UInt64) {
        unsettled[generation, default: 0] += 1
    }

    /// The writer learnt its record's fate (durable, or cut): nothing more to keep for it.
    mutating func settled(generation: UInt64) {
        guard let count = unsettled[generation] else { return }
        if count > 1 {
            unsettled[generation] = count - 1
        } else {
            unsettled[generation] = nil
            cuts[generation] = nil
        }
    }

    /// An fsync failed in `generation`: its records from byte `from` on were cut.
    mutating func cut(generation: UInt64, from: Int, error: SpoolError) {
        guard unsettled[generation] != nil else { return }  // nobody is left to ask
        cuts[generation] = (from, error)
    }

    /// The error that cut the record ending at `end` in `generation`; nil when not cut.
    func failure(generation: UInt64, end: Int) -> SpoolError? {
        guard let cut = cuts[generation], end > cut.from else { return nil }
        return cut.error
    }

    /// The cuts remembered now (for tests: bounded by the writers in flight).
    var remembered: Int { cuts.count }
}
