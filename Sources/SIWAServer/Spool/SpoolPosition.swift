/// How far replay has got: every record of segment `sequence` before `offset` has been
/// applied (or set aside). Stored as one line, `<sequence> <offset> <CRC-32>`, replaced
/// atomically after each record; a file that does not check out is ignored, which at
/// worst applies a segment's records again (harmless: the Redis layer dedupes by jti).
struct SpoolPosition: Equatable {
    var sequence: UInt64
    var offset: Int

    func encoded() -> [UInt8] {
        let fields = "\(sequence) \(offset)"
        return Array("\(fields) \(CRC32.hex(CRC32.checksum(fields.utf8)))\n".utf8)
    }

    init(sequence: UInt64, offset: Int) {
        self.sequence = sequence
        self.offset = offset
    }

    init?(encoded bytes: [UInt8]) {
        guard bytes.last == 0x0A else { return nil }
        let parts = bytes.dropLast().split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        guard parts.count == 3,
            let sequence = UInt64(String(decoding: parts[0], as: UTF8.self)),
            let offset = Int(String(decoding: parts[1], as: UTF8.self)), offset >= 0,
            let checksum = UInt32(String(decoding: parts[2], as: UTF8.self), radix: 16),
            CRC32.checksum(bytes[..<(parts[1].endIndex)]) == checksum
        else { return nil }
        self.sequence = sequence
        self.offset = offset
    }
}
