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
///   never followed by new records.
/// - `replay-position`: how far replay got in the oldest segment, replaced atomically after
///   every record, so applied records are not sent again after a crash (except the one
///   being applied at the crash, at most).
/// - `segment-<sequence>.torn`: bytes of torn or corrupt records, set aside by replay.
///
/// Thread safety: any number of threads may append at once (appends are serialised, each
/// write and fsync done before it returns); one replay runs at a time, alongside appends.
public final class NotificationSpool: Sendable {
    public let directory: String
    /// A segment is sealed once it reaches this size, which bounds what replay reads at once.
    public let segmentByteLimit: Int

    private struct Writer {
        /// The open segment, if any; nil until the next append opens one.
        var descriptor: Int32?
        /// The newest sequence number used. Sequences only grow, never reused.
        var sequence: UInt64
        var size: Int
    }

    private let writer: Mutex<Writer>
    /// Held for a whole replay, which is what makes replays one at a time.
    private let position: Mutex<SpoolPosition?>
    private let waiting: Atomic<Int>

    private static let segmentPrefix = "segment-"
    private static let segmentSuffix = ".log"
    private static let positionFileName = "replay-position"
    private static let fileMode = SpoolFileSystem.privateFileMode
    private static let directoryMode = SpoolFileSystem.privateDirectoryMode

    /// Opens the spool in `directory`, creating it (mode 0700) if needed, and creates a
    /// fresh segment so a write problem shows at start. Counts the records waiting from an
    /// earlier run; they are applied by the next `replay`.
    public init(directory: String, segmentByteLimit: Int = 8 << 20) throws(SpoolError) {
        self.directory = directory
        self.segmentByteLimit = max(1, segmentByteLimit)
        try SpoolFileSystem.prepareDirectory(directory, mode: Self.directoryMode)

        let positionPath = directory + "/" + Self.positionFileName
        // An unreadable position only means re-applying records, so it does not stop the start.
        var saved: SpoolPosition?
        if let bytes = try? SpoolFileSystem.read(positionPath, code: .readFailed) {
            saved = SpoolPosition(encoded: bytes)
        }
        let sequences = try SpoolFileSystem.list(directory).compactMap(Self.sequence(ofSegment:)).sorted()
        var waitingRecords = 0
        var kept: [UInt64] = []
        for sequence in sequences {
            let path = Self.segmentPath(directory, sequence)
            guard let bytes = try SpoolFileSystem.read(path, code: .readFailed) else { continue }
            if bytes.isEmpty {
                // Left by a start or a failed append with nothing written after it; harmless if it stays.
                try? SpoolFileSystem.remove(path)
                continue
            }
            kept.append(sequence)
            var start = 0
            if let known = saved, known.sequence == sequence, known.offset <= bytes.count { start = known.offset }
            waitingRecords += SpoolSegmentReader.countRecords(in: bytes, from: start)
        }
        let highest = max(sequences.last ?? 0, saved?.sequence ?? 0)
        // A position for a segment that is gone (fully replayed) or out of range means nothing now.
        if let known = saved, !kept.contains(known.sequence) { saved = nil }

        // Always a new segment: a crash may have left the newest one ending in a torn record.
        let sequence = highest + 1
        let descriptor = try SpoolFileSystem.createForAppend(Self.segmentPath(directory, sequence), mode: Self.fileMode)
        do throws(SpoolError) {
            try SpoolFileSystem.syncDirectory(directory)
        } catch {
            SpoolFileSystem.close(descriptor)
            throw error
        }
        writer = Mutex(Writer(descriptor: descriptor, sequence: sequence, size: 0))
        position = Mutex(saved)
        waiting = Atomic(waitingRecords)
    }

    deinit {
        writer.withLock { state in
            if let descriptor = state.descriptor { SpoolFileSystem.close(descriptor) }
            state.descriptor = nil
        }
    }

    /// Records waiting to be replayed, for metrics and /healthz.
    public var depth: Int { max(0, waiting.load(ordering: .relaxed)) }

    /// Appends one record and fsyncs it. When this returns the notification survives a
    /// crash, and only then may the responder answer 200; when it throws, answer 503.
    public func append(_ notification: VerifiedNotification) throws(SpoolError) {
        let line = SpoolRecord.encode(notification)
        try writer.withLock { (state: inout Writer) throws(SpoolError) in
            if let descriptor = state.descriptor, state.size > 0, state.size + line.count > segmentByteLimit {
                SpoolFileSystem.close(descriptor)
                state.descriptor = nil
            }
            let descriptor: Int32
            if let open = state.descriptor {
                descriptor = open
            } else {
                state.sequence += 1
                descriptor = try SpoolFileSystem.createForAppend(
                    Self.segmentPath(directory, state.sequence), mode: Self.fileMode)
                do throws(SpoolError) {
                    try SpoolFileSystem.syncDirectory(directory)
                } catch {
                    SpoolFileSystem.close(descriptor)
                    throw error
                }
                state.descriptor = descriptor
                state.size = 0
            }
            let path = Self.segmentPath(directory, state.sequence)
            do throws(SpoolError) {
                try SpoolFileSystem.writeAll(descriptor, line, code: .writeFailed, path: path)
                try SpoolFileSystem.sync(descriptor, path: path)
            } catch {
                // Take back a partial record, and after a failed write or fsync never trust
                // this file again: later records go to a new segment. Whatever stays in this
                // one is either whole (harmless to apply) or a torn tail replay sets aside.
                _ = SpoolFileSystem.truncate(descriptor, to: state.size)
                SpoolFileSystem.close(descriptor)
                state.descriptor = nil
                throw error
            }
            state.size += line.count
            waiting.add(1, ordering: .relaxed)
        }
    }

    /// Applies the waiting records in the order they were appended, oldest segment first.
    ///
    /// Stops at the first error `apply` throws: that record and all later ones stay for the
    /// next replay. Each applied record is committed (the replay position is saved durably)
    /// before the next one, so a crash re-applies at most the record being applied. Torn or
    /// corrupt records are moved to `.torn` files and listed in the report. Records appended
    /// while a replay runs go to a new segment and wait for the next replay.
    ///
    /// `apply` may call `append` but must not call `replay` (replays are one at a time, and
    /// a nested one would wait for itself). Each record costs a rename and two fsyncs for
    /// the position, which is slow beside Redis but only runs after an outage.
    public func replay(_ apply: (VerifiedNotification) throws -> Void) -> SpoolReplayReport {
        position.withLock { (saved: inout SpoolPosition?) -> SpoolReplayReport in
            var report = SpoolReplayReport(applied: 0, setAside: [], applyError: nil, spoolError: nil, remaining: 0)
            do throws(SpoolError) {
                for sequence in try sealSegments() {
                    guard try replaySegment(sequence, saved: &saved, report: &report, apply: apply) else { break }
                }
            } catch {
                report.spoolError = error
            }
            report.remaining = depth
            return report
        }
    }

    /// Seals the open segment if it holds anything and returns every sealed segment, oldest first.
    private func sealSegments() throws(SpoolError) -> [UInt64] {
        try writer.withLock { (state: inout Writer) throws(SpoolError) -> [UInt64] in
            if let descriptor = state.descriptor, state.size > 0 {
                SpoolFileSystem.close(descriptor)
                state.descriptor = nil
            }
            let open = state.descriptor == nil ? nil : state.sequence
            return try SpoolFileSystem.list(directory).compactMap(Self.sequence(ofSegment:)).filter { $0 != open }
                .sorted()
        }
    }

    /// Replays one sealed segment and deletes it once done; false when the replay must stop.
    private func replaySegment(
        _ sequence: UInt64, saved: inout SpoolPosition?, report: inout SpoolReplayReport,
        apply: (VerifiedNotification) throws -> Void
    ) throws(SpoolError) -> Bool {
        let path = Self.segmentPath(directory, sequence)
        guard let bytes = try SpoolFileSystem.read(path, code: .readFailed) else { return true }
        var start = 0
        if let known = saved, known.sequence == sequence, known.offset <= bytes.count { start = known.offset }
        var reader = SpoolSegmentReader(bytes: bytes, offset: start)
        while let entry = reader.next() {
            switch entry {
            case .record(let notification, let end):
                do {
                    try apply(notification)
                } catch {
                    report.applyError = error
                    return false
                }
                try commit(SpoolPosition(sequence: sequence, offset: end), saved: &saved)
                waiting.subtract(1, ordering: .relaxed)
                report.applied += 1
            case .bad(let reason, let badStart, let end):
                let tornPath = Self.tornPath(directory, sequence)
                // Set aside first, then move past: a crash in between copies the bytes twice, never zero times.
                try SpoolFileSystem.appendDurably(
                    tornPath, Array(bytes[badStart..<end]), mode: Self.fileMode, directory: directory)
                try commit(SpoolPosition(sequence: sequence, offset: end), saved: &saved)
                report.setAside.append(
                    SpoolSetAside(
                        reason: reason, segmentFile: path, offset: badStart, byteCount: end - badStart,
                        tornFile: tornPath))
            }
        }
        try SpoolFileSystem.remove(path)
        do { try SpoolFileSystem.syncDirectory(directory) } catch { throw SpoolError(.removeFailed, error.message) }
        return true
    }

    private func commit(_ next: SpoolPosition, saved: inout SpoolPosition?) throws(SpoolError) {
        try SpoolFileSystem.replaceAtomically(
            directory + "/" + Self.positionFileName, with: next.encoded(), mode: Self.fileMode, directory: directory)
        saved = next
    }

    private static func segmentPath(_ directory: String, _ sequence: UInt64) -> String {
        directory + "/" + segmentPrefix + paddedSequence(sequence) + segmentSuffix
    }

    private static func tornPath(_ directory: String, _ sequence: UInt64) -> String {
        directory + "/" + segmentPrefix + paddedSequence(sequence) + ".torn"
    }

    /// Zero-padded so that a directory listing sorts in append order too.
    private static func paddedSequence(_ sequence: UInt64) -> String {
        let digits = String(sequence)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
    }

    private static func sequence(ofSegment name: String) -> UInt64? {
        guard name.hasPrefix(segmentPrefix), name.hasSuffix(segmentSuffix) else { return nil }
        let digits = name.dropFirst(segmentPrefix.count).dropLast(segmentSuffix.count)
        guard digits.count == 20, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return UInt64(digits)
    }
}
