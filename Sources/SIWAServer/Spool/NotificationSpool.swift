import Foundation
import SIWASupport
import SIWAVerification
import Synchronization

/// The durable spool: where a verified notification goes when Redis cannot take it, so
/// that nothing answered 2xx is ever lost.
///
/// Layout of `directory` (mode 0700; every file mode 0600, because records hold email
/// addresses):
/// - `segment-<sequence>.log`: records, one per line (see `SpoolRecord`). Appends go to the
///   newest segment; each process start and each replay seals it and later appends open a
///   new one, so a replay reads only files nobody writes and a torn tail left by a crash is
///   never followed by new records. An append that fails in a new segment deletes it.
/// - `replay-position`: how far replay got (see `SpoolPositionFile`): two fixed slots
///   overwritten in place once per batch of records (every 256 records or 250 ms, before
///   a refused or torn record, and when a pass stops), so progress needs no new space and
///   a crash re-applies at most one batch (Redis reports those as `duplicate`).
/// - `segment-<sequence>.torn`: bytes of torn or corrupt records, moved there by replay.
/// - `requeue-<name>.log`: set-aside records put back in line by `spool requeue`; the
///   spool renames each into the next segment number at its next replay (or start), so
///   only this process ever numbers segments.
/// - `rejected/`: records Redis refused for good (see `SpoolSetAsideStore`).
///
/// Thread safety: any number of threads may append at once (writes are serialised, and
/// one fsync covers the records written before it: a group commit; each append returns
/// only once its record is fsynced); one replay runs at a time, alongside appends.
public final class NotificationSpool: Sendable {
    public let directory: String
    /// A segment is sealed once it reaches this size.
    public let segmentByteLimit: Int

    private struct Writer {
        /// The open segment, if any; nil until the next append opens one.
        var descriptor: Int32?
        /// The newest sequence number used. Sequences only grow, never reused.
        var sequence: UInt64
        var size: Int
        /// Records appended since the last replay sealed the segments (they are in segments
        /// that replay has not listed yet).
        var appendedSinceSeal: Int
        /// Bytes of the open segment known to be on disk (an fsync that began after they
        /// were written succeeded).
        var syncedSize = 0
        /// An fsync runs on `descriptor`, outside the lock: the segment may not be closed.
        var syncing = false
        /// A write failed: the next append starts a new segment.
        var mustRotate = false
        /// Counts the segments closed: a writer's record is in the open segment while its
        /// generation is this one.
        var generation: UInt64 = 0
        /// The last failed fsyncs: records of that generation from `from` on were cut.
        var failures: [(generation: UInt64, from: Int, error: SpoolError)] = []
    }

    private let writer: Mutex<Writer>
    /// Held for a whole replay, which is what makes replays one at a time.
    private let position: Mutex<SpoolPositionFile>
    private let waiting: Atomic<Int>
    private let writeFailure: Mutex<SpoolError?>
    /// Wakes writers waiting for the running fsync (see `append`).
    private let syncDoorbell = NSCondition()
    /// Wall time for the records' `spooledAt`; monotonic time for the position batches.
    private let clock: EndpointClock

    static let segmentPrefix = "segment-"
    static let segmentSuffix = ".log"
    static let tornSuffix = ".torn"
    static let requeuePrefix = "requeue-"
    static let positionFileName = "replay-position"
    /// Records taken between two saves of the replay position, at most...
    public let positionBatchRecords: Int
    /// ...and the longest time between two saves while records are being taken.
    public let positionBatchInterval: Duration
    private static let fileMode = SpoolFileSystem.privateFileMode
    private static let directoryMode = SpoolFileSystem.privateDirectoryMode

    /// Opens the spool in `directory`, creating it (mode 0700) if needed, and creates a
    /// fresh segment so a write problem shows at start. Counts the records waiting from an
    /// earlier run; they are applied by the next `replay`. Throws `positionUnreadable` when
    /// a replay position exists but cannot be read: starting anyway could skip records.
    public init(
        directory: String, segmentByteLimit: Int = 8 << 20, positionBatchRecords: Int = 256,
        positionBatchInterval: Duration = .milliseconds(250),
        clock: EndpointClock = .system
    ) throws(SpoolError) {
        self.directory = directory
        self.segmentByteLimit = max(1, segmentByteLimit)
        self.positionBatchRecords = max(1, positionBatchRecords)
        self.positionBatchInterval = positionBatchInterval
        self.clock = clock
        try SpoolFileSystem.prepareDirectory(directory, mode: Self.directoryMode)
        let positionFile = try SpoolPositionFile.open(
            directory: directory, name: Self.positionFileName, mode: Self.fileMode)
        var highest = positionFile.position.sequence
        do throws(SpoolError) {
            for sequence in try Self.segmentSequences(directory) {
                highest = max(highest, sequence)
                let path = Self.segmentPath(directory, sequence)
                if SpoolFileSystem.status(path)?.size == 0 {
                    // Left by a start with nothing written after it; harmless if it stays.
                    try? SpoolFileSystem.remove(path)
                }
            }
            highest = try Self.adoptRequeued(directory, after: highest)
            let waitingRecords = try Self.countWaiting(directory, from: positionFile.position).count

            // Always a new segment: a crash may have left the newest one ending in a torn record.
            let sequence = highest + 1
            let descriptor = try SpoolFileSystem.createForAppend(
                Self.segmentPath(directory, sequence), mode: Self.fileMode)
            do throws(SpoolError) {
                try SpoolFileSystem.syncDirectory(directory)
            } catch {
                SpoolFileSystem.close(descriptor)
                throw error
            }
            writer = Mutex(
                Writer(descriptor: descriptor, sequence: sequence, size: 0, appendedSinceSeal: 0))
            waiting = Atomic(waitingRecords)
        } catch {
            positionFile.close()
            throw error
        }
        position = Mutex(positionFile)
        writeFailure = Mutex(nil)
    }

    deinit {
        writer.withLock { state in
            if let descriptor = state.descriptor { SpoolFileSystem.close(descriptor) }
            state.descriptor = nil
        }
        position.withLock { $0.close() }
    }

    /// Records waiting to be replayed, for metrics and /healthz (recounted from disk after
    /// every replay).
    public var depth: Int { max(0, waiting.load(ordering: .relaxed)) }

    /// True when records wait: counted ones, or files `spool requeue` put back in line
    /// that the next replay will take.
    public var hasWaitingRecords: Bool {
        depth > 0 || !((try? Self.requeuedNames(directory)) ?? []).isEmpty
    }

    /// Why the last append failed, when no append (or write check) has succeeded since:
    /// the spool cannot take writes now (a full disk, a read-only file system).
    public var writeProblem: SpoolError? { writeFailure.withLock { $0 } }

    /// After a failed append, checks whether a small file can be written and fsynced now
    /// (space freed, say), and clears `writeProblem` when it can.
    public func checkWritable() {
        guard writeProblem != nil, SpoolFileSystem.canWrite(in: directory) else { return }
        writeFailure.withLock { $0 = nil }
    }

    /// Appends one record and fsyncs it. When this returns the notification survives a
    /// crash, and only then may the responder answer 200; when it throws, answer 503 (and
    /// nothing of this record is left behind: no partial line, no empty segment).
    /// `attemptedAt`: the receive time of the Redis call that did not answer, if one was made.
    ///
    /// Group commit: the record is written under the writer lock, then made durable by one
    /// `fsync` that covers every record written before it began. One writer runs that fsync
    /// at a time, outside the lock; writers that arrive meanwhile write their records and
    /// wait, and the next fsync covers them all. So N concurrent appends cost about one or
    /// two fsyncs, not N, and none returns before an fsync that began after its write.
    public func append(_ notification: VerifiedNotification, attemptedAt: Int64? = nil) throws(SpoolError) {
        let line = SpoolRecord.encode(notification, spooledAt: clock.wallMilliseconds(), attemptedAt: attemptedAt)
        do throws(SpoolError) {
            let ticket = try write(line)
            try waitUntilDurable(ticket)
        } catch {
            writeFailure.withLock { $0 = error }
            throw error
        }
        writeFailure.withLock { $0 = nil }
    }

    /// Where a written record ends, in which opening of a segment.
    private struct Ticket {
        let generation: UInt64
        let end: Int
    }

    private enum Step<Value> {
        case done(Value)
        /// An fsync is running on the open segment: wait for it, then try again.
        case wait
    }

    /// Writes the line at the end of the open segment (opening one if needed). Waits while
    /// an fsync runs only when the segment must be closed first.
    private func write(_ line: [UInt8]) throws(SpoolError) -> Ticket {
        while true {
            let step = try writer.withLock { (state: inout Writer) throws(SpoolError) -> Step<Ticket> in
                if state.descriptor != nil,
                    state.mustRotate || (state.size > 0 && state.size + line.count > segmentByteLimit)
                {
                    guard !state.syncing else { return .wait }
                    closeOpenSegment(&state)
                }
                let descriptor = try openSegmentIfNeeded(&state)
                let path = Self.segmentPath(directory, state.sequence)
                do throws(SpoolError) {
                    try SpoolFileSystem.writeAll(descriptor, line, code: .writeFailed, path: path)
                } catch {
                    // Take back a partial record; later records go to a new segment. What
                    // stays in this one is whole records of other writers, still to be
                    // fsynced. A segment that holds nothing goes: a full disk must not
                    // fill up with names.
                    _ = SpoolFileSystem.truncate(descriptor, to: state.size)
                    state.mustRotate = true
                    if state.size == 0 && !state.syncing { closeOpenSegment(&state) }
                    throw error
                }
                state.size += line.count
                return .done(Ticket(generation: state.generation, end: state.size))
            }
            switch step {
            case .done(let ticket): return ticket
            case .wait: waitForSync()
            }
        }
    }

    /// Returns once an fsync that began after the ticket's write has succeeded; throws when
    /// the fsync that covered it failed (the record was then cut from the segment).
    private func waitUntilDurable(_ ticket: Ticket) throws(SpoolError) {
        enum Next {
            case durable
            case failed(SpoolError)
            case wait
            case sync(descriptor: Int32, target: Int, path: String)
        }
        while true {
            let next = writer.withLock { (state: inout Writer) -> Next in
                if let failure = state.failures.first(where: { $0.generation == ticket.generation }),
                    ticket.end > failure.from
                {
                    return .failed(failure.error)
                }
                if ticket.generation != state.generation || state.syncedSize >= ticket.end {
                    // Durable: closing a segment fsyncs it first, or records a failure.
                    if ticket.generation == state.generation { state.appendedSinceSeal += 1 }
                    waiting.add(1, ordering: .relaxed)
                    return .durable
                }
                guard !state.syncing, let descriptor = state.descriptor else { return .wait }
                state.syncing = true
                return .sync(
                    descriptor: descriptor, target: state.size, path: Self.segmentPath(directory, state.sequence))
            }
            switch next {
            case .durable: return
            case .failed(let error): throw error
            case .wait: waitForSync()
            case .sync(let descriptor, let target, let path):
                // Outside the lock: other writers go on writing, and the next fsync takes them.
                let result: SpoolError?
                do throws(SpoolError) {
                    try SpoolFileSystem.sync(descriptor, path: path)
                    result = nil
                } catch {
                    result = error
                }
                writer.withLock { (state: inout Writer) in
                    state.syncing = false
                    if let result {
                        failOpenSegment(&state, result)
                    } else {
                        state.syncedSize = max(state.syncedSize, target)
                    }
                }
                ringSyncDoorbell()
            }
        }
    }

    /// Opens a new segment (made durable in its directory) when none is open.
    private func openSegmentIfNeeded(_ state: inout Writer) throws(SpoolError) -> Int32 {
        if let open = state.descriptor { return open }
        state.sequence += 1
        let descriptor = try SpoolFileSystem.createForAppend(
            Self.segmentPath(directory, state.sequence), mode: Self.fileMode)
        do throws(SpoolError) {
            try SpoolFileSystem.syncDirectory(directory)
        } catch {
            SpoolFileSystem.close(descriptor)
            try? SpoolFileSystem.remove(Self.segmentPath(directory, state.sequence))
            throw error
        }
        state.descriptor = descriptor
        state.size = 0
        state.syncedSize = 0
        state.mustRotate = false
        return descriptor
    }

    /// Closes the open segment (no fsync may be running on it): what was written and not yet
    /// fsynced is fsynced first, so writers waiting for it learn it is durable, or, if that
    /// fsync fails, that their records were cut. An empty segment is removed.
    private func closeOpenSegment(_ state: inout Writer) {
        guard let descriptor = state.descriptor else { return }
        precondition(!state.syncing, "a segment was closed while an fsync ran on it")
        if state.size > state.syncedSize {
            do throws(SpoolError) {
                try SpoolFileSystem.sync(descriptor, path: Self.segmentPath(directory, state.sequence))
                state.syncedSize = state.size
            } catch {
                failOpenSegment(&state, error)
                return
            }
        }
        SpoolFileSystem.close(descriptor)
        if state.size == 0 {
            try? SpoolFileSystem.remove(Self.segmentPath(directory, state.sequence))
            try? SpoolFileSystem.syncDirectory(directory)
        }
        state.descriptor = nil
        state.generation += 1
    }

    /// An fsync of the open segment failed: every record written since the last good fsync
    /// fails, is cut from the file, and the file is never written again.
    private func failOpenSegment(_ state: inout Writer, _ error: SpoolError) {
        guard let descriptor = state.descriptor else { return }
        state.failures.append((generation: state.generation, from: state.syncedSize, error: error))
        if state.failures.count > 16 { state.failures.removeFirst() }
        _ = SpoolFileSystem.truncate(descriptor, to: state.syncedSize)
        SpoolFileSystem.close(descriptor)
        if state.syncedSize == 0 {
            try? SpoolFileSystem.remove(Self.segmentPath(directory, state.sequence))
            try? SpoolFileSystem.syncDirectory(directory)
        }
        state.descriptor = nil
        state.size = state.syncedSize
        state.generation += 1
    }

    /// Waits until the running fsync ends (bounded, then the caller looks again).
    private func waitForSync() {
        syncDoorbell.lock()
        defer { syncDoorbell.unlock() }
        if writer.withLock({ $0.syncing }) { _ = syncDoorbell.wait(until: Date(timeIntervalSinceNow: 0.05)) }
    }

    private func ringSyncDoorbell() {
        syncDoorbell.lock()
        syncDoorbell.broadcast()
        syncDoorbell.unlock()
    }

    /// Applies the waiting records in the order they were appended, oldest segment first.
    ///
    /// Stops at the first `Stop` that `step` throws: that record and all later ones stay for
    /// the next replay. Records taken are committed (the replay position saved durably) once
    /// per batch and whenever the pass stops, so a crash re-applies at most one batch. Torn or
    /// corrupt records are moved to `.torn` files and listed in the report. Records appended
    /// while a replay runs go to a new segment and wait for the next replay. `step` says what
    /// became of each record (stored with Redis's outcome, or refused and kept in
    /// `rejected/`); it gets each record's `attemptedAt` (see `append`) beside the notification.
    ///
    /// `step` may call `append` but must not call `replay` (replays are one at a time, and
    /// a nested one would wait for itself). After the pass, the depth is recounted from disk.
    public func replay<Stop: Error>(
        _ step: (VerifiedNotification, _ attemptedAt: Int64?) throws(Stop) -> SpoolReplayStep
    ) -> SpoolReplayReport<Stop> {
        position.withLock { (file: inout SpoolPositionFile) -> SpoolReplayReport<Stop> in
            var report = SpoolReplayReport<Stop>(taken: 0, torn: [], stop: nil, spoolError: nil, remaining: 0)
            var sealed: [UInt64] = []
            do throws(SpoolError) {
                sealed = try sealSegments()
                for sequence in sealed {
                    guard try replaySegment(sequence, file: &file, report: &report, step: step) else { break }
                }
            } catch {
                report.spoolError = error
            }
            recount(sealed: sealed, from: file.position)
            report.remaining = depth
            return report
        }
    }

    /// Applies the waiting records, counting every one as stored with outcome `applied`.
    public func replay<Stop: Error>(_ apply: (VerifiedNotification) throws(Stop) -> Void) -> SpoolReplayReport<Stop> {
        replay { (notification, _) throws(Stop) -> SpoolReplayStep in
            try apply(notification)
            return .stored(.applied)
        }
    }

    /// Sets the depth to what the disk holds: the records still waiting in the segments this
    /// pass listed, plus those appended since (which went to segments it did not list).
    private func recount(sealed: [UInt64], from saved: SpoolPosition) {
        var onDisk = 0
        for sequence in sealed {
            let start = saved.sequence == sequence ? saved.offset : 0
            guard
                let counted = try? SpoolSegmentReader.countRecords(
                    path: Self.segmentPath(directory, sequence), from: start)
            else { return }  // unreadable now: keep the running count rather than guess
            onDisk += counted.count
        }
        writer.withLock { state in waiting.store(onDisk + state.appendedSinceSeal, ordering: .relaxed) }
    }

    /// Seals the open segment, adopts requeued files, and returns every segment, oldest first.
    private func sealSegments() throws(SpoolError) -> [UInt64] {
        while true {
            let step = try writer.withLock { (state: inout Writer) throws(SpoolError) -> Step<[UInt64]> in
                guard !state.syncing else { return .wait }
                closeOpenSegment(&state)
                state.appendedSinceSeal = 0
                state.sequence = try Self.adoptRequeued(directory, after: state.sequence)
                return .done(try Self.segmentSequences(directory))
            }
            switch step {
            case .done(let sequences):
                ringSyncDoorbell()
                return sequences
            case .wait: waitForSync()
            }
        }
    }

    /// Replays one sealed segment and deletes it once done; false when the replay must stop.
    private func replaySegment<Stop: Error>(
        _ sequence: UInt64, file: inout SpoolPositionFile, report: inout SpoolReplayReport<Stop>,
        step: (VerifiedNotification, Int64?) throws(Stop) -> SpoolReplayStep
    ) throws(SpoolError) -> Bool {
        let path = Self.segmentPath(directory, sequence)
        let saved = file.position
        let start = saved.sequence == sequence ? saved.offset : 0
        guard let reader = try SpoolSegmentReader(path: path, offset: start) else { return true }
        // The position is saved once per batch (`positionBatchRecords`, `positionBatchInterval`), not per record:
        // a crash re-applies at most the batch taken since the last save, which Redis's jti
        // markers report as `duplicate`. A refused or torn record is committed at once.
        var pending: SpoolPosition?
        var pendingCount = 0
        var lastSave = clock.monotonic()
        func commit() throws(SpoolError) {
            guard let next = pending else { return }
            try file.save(next)
            pending = nil
            pendingCount = 0
            lastSave = clock.monotonic()
        }
        do throws(SpoolError) {
            while let entry = try reader.next() {
                switch entry {
                case .record(let notification, _, let attemptedAt, let end):
                    let taken: SpoolReplayStep
                    do throws(Stop) {
                        taken = try step(notification, attemptedAt)
                    } catch {
                        report.stop = error
                        try commit()
                        return false
                    }
                    pending = SpoolPosition(sequence: sequence, offset: end)
                    pendingCount += 1
                    waiting.subtract(1, ordering: .relaxed)
                    report.taken += 1
                    report.steps[taken, default: 0] += 1
                    if taken == .refused || pendingCount >= positionBatchRecords
                        || clock.monotonic() - lastSave >= positionBatchInterval
                    {
                        try commit()
                    }
                case .bad(let reason, let badStart, let end):
                    try commit()
                    let tornPath = Self.tornPath(directory, sequence)
                    // Set aside first, then move past: a crash in between copies the bytes twice, never zero times.
                    try SpoolFileSystem.appendRangeDurably(
                        from: path, badStart, end, to: tornPath, mode: Self.fileMode, directory: directory)
                    try file.save(SpoolPosition(sequence: sequence, offset: end))
                    report.torn.append(
                        SpoolTornRecord(
                            reason: reason, segmentFile: path, offset: badStart, byteCount: end - badStart,
                            tornFile: tornPath))
                }
            }
            try commit()
        } catch {
            // A read error mid-segment: keep what was taken before it (best effort).
            try? commit()
            throw error
        }
        try SpoolFileSystem.remove(path)
        do { try SpoolFileSystem.syncDirectory(directory) } catch { throw SpoolError(.removeFailed, error.message) }
        return true
    }

    // MARK: - The layout, shared with `SpoolInspector`

    static func segmentPath(_ directory: String, _ sequence: UInt64) -> String {
        directory + "/" + segmentPrefix + paddedSequence(sequence) + segmentSuffix
    }

    static func tornPath(_ directory: String, _ sequence: UInt64) -> String {
        directory + "/" + segmentPrefix + paddedSequence(sequence) + tornSuffix
    }

    /// Zero-padded so that a directory listing sorts in append order too.
    static func paddedSequence(_ sequence: UInt64) -> String {
        let digits = String(sequence)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
    }

    static func sequence(ofSegment name: String) -> UInt64? {
        guard name.hasPrefix(segmentPrefix), name.hasSuffix(segmentSuffix) else { return nil }
        let digits = name.dropFirst(segmentPrefix.count).dropLast(segmentSuffix.count)
        guard digits.count == 20, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return UInt64(digits)
    }

    static func segmentSequences(_ directory: String) throws(SpoolError) -> [UInt64] {
        try SpoolFileSystem.list(directory).compactMap(sequence(ofSegment:)).sorted()
    }

    static func requeuedNames(_ directory: String) throws(SpoolError) -> [String] {
        try SpoolFileSystem.list(directory).filter { $0.hasPrefix(requeuePrefix) && $0.hasSuffix(segmentSuffix) }
            .sorted()
    }

    /// Renames each `requeue-*.log` (oldest name first) to the next segment number after
    /// `sequence`; returns the last number used. A rename is atomic, so a record is either
    /// waiting under its requeue name or in a segment, never both.
    private static func adoptRequeued(_ directory: String, after sequence: UInt64) throws(SpoolError) -> UInt64 {
        var last = sequence
        let names = try requeuedNames(directory)
        for name in names where try SpoolFileSystem.move(directory + "/" + name, to: segmentPath(directory, last + 1)) {
            last += 1
        }
        if !names.isEmpty { try SpoolFileSystem.syncDirectory(directory) }
        return last
    }

    /// Records waiting in the segments of `directory` from `position` on, and when the
    /// oldest of them was spooled.
    static func countWaiting(_ directory: String, from position: SpoolPosition) throws(SpoolError) -> (
        count: Int, firstSpooledAt: Int64?, firstSegment: String?
    ) {
        var count = 0
        var first: Int64?
        var firstSegment: String?
        for sequence in try segmentSequences(directory) {
            let path = segmentPath(directory, sequence)
            let counted = try SpoolSegmentReader.countRecords(
                path: path, from: position.sequence == sequence ? position.offset : 0)
            if count == 0 && counted.count > 0 {
                first = counted.firstSpooledAt
                firstSegment = path
            }
            count += counted.count
        }
        return (count, first, firstSegment)
    }
}
