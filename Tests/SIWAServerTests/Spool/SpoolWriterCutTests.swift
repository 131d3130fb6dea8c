import Foundation
import Glibc
import Testing

@testable import SIWASpool

/// The writer's promise, "durable before it returns", at the two places no end-to-end
/// test reaches deterministically: the fsync made when a segment is closed at rotation,
/// and the memory of which records a failed fsync cut.
@Suite("Spool writer: the fsync at rotation, and cut records remembered while asked")
struct SpoolWriterCutTests {
    /// A record is written and not yet fsynced; the next write rotates the segment, so
    /// closing it must fsync the record first, and its writer must learn the result. The
    /// segment's descriptor is swapped for a pipe's, on which fsync fails (EINVAL): a close
    /// that fsyncs reports the record cut; one that did not would call it durable.
    @Test("closing a segment at rotation fsyncs what it holds, and a failure there fails its writer")
    func rotationFsyncsAndReportsItsFailure() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory)
            let first = try spool.write(SpoolRecord.encode(spoolNotification(1)))
            var pipeEnds: [Int32] = [0, 0]
            try #require(pipe(&pipeEnds) == 0)
            defer { close(pipeEnds[0]) }
            let segment = try #require(spool.writer.withLock { $0.descriptor })
            spool.writer.withLock {
                $0.descriptor = pipeEnds[1]  // closed by the writer when it gives the segment up
                $0.mustRotate = true
            }
            close(segment)
            let second = try spool.write(SpoolRecord.encode(spoolNotification(2)))
            #expect(second.generation == first.generation + 1, "the second write went to a new segment")
            #expect(throws: SpoolError.self, "the first record's fsync at rotation failed: it must not be durable") {
                try spool.waitUntilDurable(first)
            }
            try spool.waitUntilDurable(second)
            #expect(spool.writer.withLock { $0.cut.remembered } == 0, "both writers asked: nothing is kept")
        }
    }

    @Test("the same rotation with a real segment: the first record is durable, and both replay")
    func rotationWithARealSegment() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory)
            let first = try spool.write(SpoolRecord.encode(spoolNotification(1)))
            spool.writer.withLock { $0.mustRotate = true }
            let second = try spool.write(SpoolRecord.encode(spoolNotification(2)))
            try spool.waitUntilDurable(first)
            try spool.waitUntilDurable(second)
            #expect(spool.writer.withLock { $0.syncedSize == $0.size })
            var replayed: [String] = []
            _ = spool.replay { replayed.append($0.tokenID) }
            #expect(replayed == ["t1", "t2"])
        }
    }

    /// A writer slow to ask (descheduled between its write and its wait) while many later
    /// segments fail their fsyncs: its cut is still known when it asks, however many came
    /// after (the memory was 16 entries, oldest dropped), and forgotten once it has asked.
    @Test("a cut is remembered until its last writer has asked, however many cuts come after")
    func cutsAreKeptWhileAsked() {
        var cuts = SpoolCutRecords()
        let failure = SpoolError(.syncFailed, "fsync failed (test)")
        cuts.issued(generation: 0)
        cuts.issued(generation: 0)
        cuts.cut(generation: 0, from: 100, error: failure)
        // Forty later openings cut, their writers yet to ask too.
        for generation in UInt64(1)...40 {
            cuts.issued(generation: generation)
            cuts.cut(generation: generation, from: 0, error: failure)
        }
        #expect(cuts.failure(generation: 0, end: 150)?.code == .syncFailed, "cut from byte 100 on")
        #expect(cuts.remembered == 41)
        for generation in UInt64(1)...40 {
            #expect(cuts.failure(generation: generation, end: 10) != nil)
            cuts.settled(generation: generation)
        }
        #expect(cuts.remembered == 1)
        #expect(cuts.failure(generation: 0, end: 150)?.code == .syncFailed)
        #expect(cuts.failure(generation: 0, end: 100) == nil, "a record ending before the cut was durable")
        cuts.settled(generation: 0)
        #expect(cuts.failure(generation: 0, end: 150) != nil, "one writer of generation 0 has yet to ask")
        cuts.settled(generation: 0)
        #expect(cuts.remembered == 0)
        // A cut nobody can ask about is not kept at all.
        cuts.cut(generation: 41, from: 0, error: failure)
        #expect(cuts.remembered == 0)
    }
}
