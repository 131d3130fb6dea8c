import SIWAVerification

/// Walks the records of one segment's bytes from a starting offset.
struct SpoolSegmentReader {
    enum Entry {
        /// A whole record; `end` is the offset just past its newline.
        case record(VerifiedNotification, end: Int)
        /// Bytes that are not a whole, intact record.
        case bad(SpoolSetAside.Reason, start: Int, end: Int)
    }

    private let bytes: [UInt8]
    private(set) var offset: Int

    init(bytes: [UInt8], offset: Int) {
        self.bytes = bytes
        self.offset = offset
    }

    mutating func next() -> Entry? {
        guard offset < bytes.count else { return nil }
        let start = offset
        guard let newline = bytes[start...].firstIndex(of: 0x0A) else {
            offset = bytes.count
            return .bad(.tornTail, start: start, end: bytes.count)
        }
        offset = newline + 1
        switch SpoolRecord.decode(bytes[start..<newline]) {
        case .notification(let notification): return .record(notification, end: offset)
        case .bad(let reason): return .bad(reason, start: start, end: offset)
        }
    }

    /// How many whole, intact records lie ahead.
    static func countRecords(in bytes: [UInt8], from offset: Int) -> Int {
        var reader = SpoolSegmentReader(bytes: bytes, offset: offset)
        var count = 0
        while let entry = reader.next() {
            if case .record = entry { count += 1 }
        }
        return count
    }
}
