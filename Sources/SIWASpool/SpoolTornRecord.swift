/// A record the replay could not apply because its bytes are not a whole, intact
/// record. Its bytes were appended, unchanged, to `tornFile` before the replay moved
/// past them, so nothing is discarded; the caller logs this (it holds no record content).
public struct SpoolTornRecord: Sendable, Equatable {
    public enum Reason: String, Sendable {
        /// The segment ends inside a record: a crash or a failed write mid-append. Such a
        /// record was never acknowledged with a 2xx.
        case tornTail = "torn_tail"
        /// A whole line whose CRC-32 does not match its JSON: the bytes changed on disk.
        case checksumMismatch = "checksum_mismatch"
        /// A whole line that is not a record: bad framing, wrong length, or JSON that is
        /// not a notification of a known record version.
        case malformed
    }

    public let reason: Reason
    /// The segment file the bytes came from (already deleted once fully replayed).
    public let segmentFile: String
    /// Where the bytes started in that segment.
    public let offset: Int
    public let byteCount: Int
    /// The file now holding the bytes (mode 0600: a record may hold an email address).
    public let tornFile: String

    public init(reason: Reason, segmentFile: String, offset: Int, byteCount: Int, tornFile: String) {
        self.reason = reason
        self.segmentFile = segmentFile
        self.offset = offset
        self.byteCount = byteCount
        self.tornFile = tornFile
    }
}
