import Foundation
import SIWASupport

/// The directory layout (see `NotificationSpool`): file names, sequences, counting what waits.
/// Shared with `SpoolInspector`.
extension NotificationSpool {
    static let segmentPrefix = "segment-"
    static let segmentSuffix = ".log"
    static let tornSuffix = ".torn"
    static let requeuePrefix = "requeue-"
    static let positionFileName = "replay-position"

    /// What opening the spool would refuse beyond what reading it shows (`SpoolInspector`),
    /// found without changing anything (`serve --check`): a replay position this user may
    /// not update, a leftover of `rejected/` that cannot be settled.
    public static func checkOpening(directory: String) throws(SpoolError) {
        try SpoolPositionFile.checkUpdatable(directory: directory, name: positionFileName)
        try SpoolSetAsideStore.checkLeftovers(spoolDirectory: directory)
    }

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
    static func adoptRequeued(_ directory: String, after sequence: UInt64) throws(SpoolError) -> UInt64 {
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
