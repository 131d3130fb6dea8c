#if canImport(Glibc)
    import Glibc
#endif

/// How far replay has got: every record of segment `sequence` before `offset` has been
/// applied (or set aside). Sequence 0 means no segment has been replayed from yet.
struct SpoolPosition: Equatable {
    var sequence: UInt64
    var offset: Int

    init(sequence: UInt64, offset: Int) {
        self.sequence = sequence
        self.offset = offset
    }

    /// The one-line format of earlier releases, `<sequence> <offset> <CRC-32>\n`, read once
    /// when a spool written by one of them is opened.
    init?(legacy bytes: [UInt8]) {
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

/// The replay position on disk: a file of fixed size, two slots of 64 bytes, each
/// `<generation> <sequence> <offset> <CRC-32>` padded with spaces and ending in a newline.
///
/// A save overwrites the older slot in place and fdatasyncs it, so recording progress
/// never needs a block the file does not already have: replay goes on when the disk is
/// full. A save torn by a crash spoils only the slot being written; the other still holds
/// the previous position (replaying one record again is harmless: the Redis layer dedupes
/// by jti). A file that exists but yields no valid slot, or cannot be read, stops the
/// spool from opening (`positionUnreadable`): guessing could skip records.
struct SpoolPositionFile {
    static let slotSize = 64
    static let fileSize = 2 * slotSize

    let path: String
    private let descriptor: Int32
    private var generation: UInt64
    /// The position in the newest valid slot.
    private(set) var position: SpoolPosition

    /// Opens the position file in `directory`, creating it (atomically, already full size)
    /// when absent and converting a legacy one-line file.
    /// What `open` would refuse in a file that reads well, found without changing it
    /// (`serve --check`): one this user may read but not update.
    static func checkUpdatable(directory: String, name: String) throws(SpoolError) {
        let path = directory + "/" + name
        guard SpoolFileSystem.status(path) != nil, access(path, R_OK | W_OK) != 0 else { return }
        throw SpoolError(.positionUnreadable, "cannot open \(path) for update: \(String(cString: strerror(errno)))")
    }

    static func open(directory: String, name: String, mode: mode_t) throws(SpoolError) -> SpoolPositionFile {
        let path = directory + "/" + name
        var found = try read(path)
        if found == nil {
            try SpoolFileSystem.createDurably(
                path, encodeFile(SpoolPosition(sequence: 0, offset: 0), generation: 1), mode: mode,
                directory: directory, code: .commitFailed)
            found = (SpoolPosition(sequence: 0, offset: 0), 1, false)
        } else if let legacy = found, legacy.isLegacy {
            _ = try SpoolFileSystem.writeDurably(
                path, encodeFile(legacy.position, generation: 1), mode: mode, directory: directory,
                code: .commitFailed)
            found = (legacy.position, 1, false)
        }
        guard let found else { throw SpoolError(.positionUnreadable, "\(path) vanished while being opened") }
        let descriptor = try SpoolFileSystem.openForUpdate(path, code: .positionUnreadable)
        return SpoolPositionFile(
            path: path, descriptor: descriptor, generation: found.generation, position: found.position)
    }

    private init(path: String, descriptor: Int32, generation: UInt64, position: SpoolPosition) {
        self.path = path
        self.descriptor = descriptor
        self.generation = generation
        self.position = position
    }

    func close() { SpoolFileSystem.close(descriptor) }

    /// Saves `next` durably, in place.
    mutating func save(_ next: SpoolPosition) throws(SpoolError) {
        let nextGeneration = generation + 1
        try SpoolFileSystem.overwriteDurably(
            descriptor, Self.encodeSlot(next, generation: nextGeneration),
            at: Int(nextGeneration % 2) * Self.slotSize, path: path)
        generation = nextGeneration
        position = next
    }

    /// The saved position of the file at `path`, without changing anything (what
    /// `spool status` reads): nil when there is no file; throws when it cannot be read or
    /// no slot checks out.
    static func read(_ path: String) throws(SpoolError) -> (
        position: SpoolPosition, generation: UInt64, isLegacy: Bool
    )? {
        guard let descriptor = try SpoolFileSystem.openForReading(path, code: .positionUnreadable) else { return nil }
        defer { SpoolFileSystem.close(descriptor) }
        let bytes = try SpoolFileSystem.readAt(
            descriptor, offset: 0, count: fileSize + 1, code: .positionUnreadable, path: path)
        if bytes.count == fileSize {
            let slots = [decodeSlot(bytes[0..<slotSize]), decodeSlot(bytes[slotSize..<fileSize])].compactMap { $0 }
            if let newest = slots.max(by: { $0.generation < $1.generation }) {
                return (newest.position, newest.generation, false)
            }
        } else if let legacy = SpoolPosition(legacy: bytes) {
            return (legacy, 0, true)
        }
        throw SpoolError(
            .positionUnreadable,
            "\(path) does not hold a valid replay position; to replay every waiting record from the start "
                + "of the oldest segment (records already applied come back as duplicates), delete it and start again")
    }

    static func encodeFile(_ position: SpoolPosition, generation: UInt64) -> [UInt8] {
        // Slot `generation % 2` holds the position; the other is blank (invalid) until the next save.
        let blank = [UInt8](repeating: UInt8(ascii: " "), count: slotSize - 1) + [0x0A]
        let slot = encodeSlot(position, generation: generation)
        return generation % 2 == 0 ? slot + blank : blank + slot
    }

    static func encodeSlot(_ position: SpoolPosition, generation: UInt64) -> [UInt8] {
        let fields = "\(generation) \(position.sequence) \(position.offset)"
        let text = Array("\(fields) \(CRC32.hex(CRC32.checksum(fields.utf8)))".utf8)
        return text + [UInt8](repeating: UInt8(ascii: " "), count: max(0, slotSize - 1 - text.count)) + [0x0A]
    }

    static func decodeSlot(_ slot: ArraySlice<UInt8>) -> (position: SpoolPosition, generation: UInt64)? {
        guard slot.count == slotSize, slot.last == 0x0A else { return nil }
        let parts = slot.dropLast().split(separator: UInt8(ascii: " "))
        guard parts.count == 4,
            let generation = UInt64(String(decoding: parts[0], as: UTF8.self)), generation > 0,
            let sequence = UInt64(String(decoding: parts[1], as: UTF8.self)),
            let offset = Int(String(decoding: parts[2], as: UTF8.self)), offset >= 0,
            let checksum = UInt32(String(decoding: parts[3], as: UTF8.self), radix: 16),
            CRC32.checksum(slot[slot.startIndex..<parts[2].endIndex]) == checksum
        else { return nil }
        return (SpoolPosition(sequence: sequence, offset: offset), generation)
    }
}
