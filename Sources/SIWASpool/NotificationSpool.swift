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
///   a rejected or torn record, and when a pass stops), so progress needs no new space and
///   a crash re-applies at most one batch (Redis reports those as `duplicate`).
/// - `segment-<sequence>.torn`: bytes of torn or corrupt records, moved there by replay.
/// - `requeue-<name>.log`: rejected records put back in line by `spool requeue`; the
///   spool renames each into the next segment number at its next replay (or start), so
///   only this process ever numbers segments.
/// - `rejected/`: rejected records, which Redis refused for a reason about them (see
///   `SpoolSetAsideStore`).
///
/// Two words, kept apart: a *torn* record is bytes that are not a whole, intact record
/// (`SpoolTornRecord`, `.torn` files); a *rejected* record is a whole one Redis refused
/// (`SpoolReplayStep.rejected`, `rejected/`). The log and `spool status` say the same
/// (`spool_record_torn`, `rejected`); their former names, which said "set aside" for
/// either, are written beside them for one release (`SpoolRenamedEvent`). `spool list`'s
/// `kind` (`set_aside`) and the error codes `spool_set_aside_*` keep their names.
///
/// The writer's group commit is in `NotificationSpool+Writer.swift`, the replay in
/// `NotificationSpool+Replay.swift`, the file names in `NotificationSpool+Layout.swift`.
///
/// Thread safety: any number of threads may append at once (writes are serialised, and
/// one fsync covers the records written before it: a group commit; each append returns
/// only once its record is fsynced); one replay runs at a time, alongside appends.
public final class NotificationSpool: Sendable {
    public let directory: String
    /// A segment is sealed once it reaches this size.
    public let segmentByteLimit: Int

    struct Writer {
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
        /// The records failed fsyncs cut, while a writer of them can still ask.
        var cut = SpoolCutRecords()
    }

    let writer: Mutex<Writer>
    /// Held for a whole replay, which is what makes replays one at a time.
    let position: Mutex<SpoolPositionFile>
    let waiting: Atomic<Int>
    let writeFailure: Mutex<SpoolError?>
    /// Wakes writers waiting for the running fsync (see `append`).
    let syncDoorbell = NSCondition()
    /// Wall time for the records' `spooledAt`; monotonic time for the position batches.
    let clock: EndpointClock

    /// Records taken between two saves of the replay position, at most...
    public let positionBatchRecords: Int
    /// ...and the longest time between two saves while records are being taken.
    public let positionBatchInterval: Duration
    static let fileMode = SpoolFileSystem.privateFileMode
    static let directoryMode = SpoolFileSystem.privateDirectoryMode

    /// Opens the spool in `directory`, creating it (mode 0700) if needed, and creates a
    /// fresh segment so a write problem shows at start. Counts the records waiting from an
    /// earlier run; they are applied by the next `replay`. Throws `positionUnreadable` when
    /// a replay position exists but cannot be read: starting anyway could skip records.
    /// Deletes the files of write checks a killed process left.
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
        SpoolFileSystem.removeLeftoverWriteChecks(in: directory)
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

    enum Step<Value> {
        case done(Value)
        /// An fsync is running on the open segment: wait for it, then try again.
        case wait
    }
}
