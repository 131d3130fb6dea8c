import SIWAVerification

#if canImport(Glibc)
    import Glibc
#endif

/// Walks the records of one segment file from a starting offset, reading it in pieces of
/// `chunkBytes`: a segment is never held in memory whole, and a line longer than
/// `maximumRecordBytes` (no record is: every field of a notification is bounded) is
/// skipped as malformed without being kept.
package final class SpoolSegmentReader {
    package enum Entry {
        /// A whole record; `end` is the offset just past its newline. `attemptedAt`: see
        /// `SpoolRecord.encode`.
        case record(VerifiedNotification, spooledAt: Int64?, attemptedAt: Int64?, end: Int)
        /// A whole record of Google's Security Event Token (see `SpoolRecord`).
        case securityEvent(VerifiedSecurityEvent, spooledAt: Int64?, attemptedAt: Int64?, end: Int)
        /// Bytes that are not a whole, intact record.
        case bad(SpoolTornRecord.Reason, start: Int, end: Int)
    }

    /// Far above any real record (a few hundred bytes; the longest field is bounded by
    /// verification), far below a hand-placed file of megabytes.
    static let defaultMaximumRecordBytes = 64 * 1024
    static let chunkBytes = 64 * 1024

    let path: String
    let maximumRecordBytes: Int
    /// The file opened, and its last modification: what a rewrite of it checks against.
    let opened: (identity: SpoolFileSystem.FileIdentity, modified: timespec)?
    private let descriptor: Int32
    private var buffer: [UInt8] = []
    private var bufferIndex = 0
    private var endOfFile = false
    /// The file offset of the next byte not yet returned.
    package private(set) var offset: Int

    /// nil when the file does not exist.
    package init?(path: String, offset: Int, maximumRecordBytes: Int = defaultMaximumRecordBytes) throws(SpoolError) {
        guard let descriptor = try SpoolFileSystem.openForReading(path, code: .readFailed) else { return nil }
        self.path = path
        self.descriptor = descriptor
        self.maximumRecordBytes = maximumRecordBytes
        opened = SpoolFileSystem.identity(of: descriptor)
        // A position past the end means nothing now (the file is not the one it was about).
        let size = SpoolFileSystem.size(of: descriptor) ?? 0
        self.offset = offset <= size ? offset : 0
    }

    deinit { SpoolFileSystem.close(descriptor) }

    package func next() throws(SpoolError) -> Entry? {
        let start = offset
        var line: [UInt8] = []
        var length = 0
        var oversized = false
        while true {
            if bufferIndex == buffer.count {
                if endOfFile { break }
                buffer = try SpoolFileSystem.readAt(
                    descriptor, offset: offset, count: Self.chunkBytes, code: .readFailed, path: path)
                bufferIndex = 0
                if buffer.isEmpty {
                    endOfFile = true
                    break
                }
            }
            let newline = buffer[bufferIndex...].firstIndex(of: 0x0A)
            let pieceEnd = newline ?? buffer.count
            let pieceCount = pieceEnd - bufferIndex
            if !oversized && length + pieceCount <= maximumRecordBytes {
                line.append(contentsOf: buffer[bufferIndex..<pieceEnd])
            } else {
                oversized = true
                line = []
            }
            length += pieceCount
            offset += pieceCount
            bufferIndex = pieceEnd
            if newline != nil {
                bufferIndex += 1
                offset += 1
                if oversized { return .bad(.malformed, start: start, end: offset) }
                switch SpoolRecord.decode(line[...]) {
                case .notification(let notification, let spooledAt, let attemptedAt):
                    return .record(notification, spooledAt: spooledAt, attemptedAt: attemptedAt, end: offset)
                case .securityEvent(let securityEvent, let spooledAt, let attemptedAt):
                    return .securityEvent(securityEvent, spooledAt: spooledAt, attemptedAt: attemptedAt, end: offset)
                case .bad(let reason): return .bad(reason, start: start, end: offset)
                }
            }
        }
        return length == 0 ? nil : .bad(.tornTail, start: start, end: offset)
    }

    /// How many whole, intact records of the file at `path` lie from `offset` on, and when
    /// the first of them was spooled (nil when unknown or none).
    package static func countRecords(path: String, from offset: Int) throws(SpoolError) -> (
        count: Int, firstSpooledAt: Int64?
    ) {
        guard let reader = try SpoolSegmentReader(path: path, offset: offset) else { return (0, nil) }
        var count = 0
        var first: Int64?
        while let entry = try reader.next() {
            switch entry {
            case .record(_, let spooledAt, _, _), .securityEvent(_, let spooledAt, _, _):
                if count == 0 { first = spooledAt }
                count += 1
            case .bad: break
            }
        }
        return (count, first)
    }
}
