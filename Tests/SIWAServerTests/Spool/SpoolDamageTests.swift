import Foundation
import SIWASpool
import SIWAVerification
import Testing

@Suite("SpoolDamage")
struct SpoolDamageTests {
    /// Appends t1...t3 in one segment, lets `damage` rewrite the segment's lines, then reopens.
    private func damagedSpool(
        _ directory: String, damage: ([[UInt8]]) -> [UInt8]
    ) throws -> (spool: NotificationSpool, segment: String, lines: [[UInt8]]) {
        do {
            let spool = try NotificationSpool(directory: directory)
            for index in 1...3 { try spool.append(spoolNotification(index)) }
        }
        let segment = try onlyNonEmptySegment(directory)
        let lines = recordLines(try fileBytes(segment))
        try #require(lines.count == 3)
        try writeBytes(damage(lines), to: segment)
        return (try NotificationSpool(directory: directory), segment, lines)
    }

    @Test func aTornTailIsSetAsideAndTheRecordsBeforeItReplay() throws {
        try withSpoolDirectory { directory in
            var tornBytes: [UInt8] = []
            let (spool, segment, lines) = try damagedSpool(directory) { lines in
                // A crash mid-append: the last record is cut in the middle of its JSON.
                tornBytes = Array(lines[2].prefix(lines[2].count / 2))
                return lines[0] + lines[1] + tornBytes
            }
            #expect(spool.depth == 2)

            var applied: [String] = []
            let report = spool.replay { applied.append($0.tokenID) }
            #expect(applied == ["t1", "t2"])
            #expect(report.taken == 2)
            #expect(report.isComplete)
            try #require(report.torn.count == 1)
            let torn = report.torn[0]
            #expect(torn.reason == .tornTail)
            #expect(torn.segmentFile == segment)
            #expect(torn.offset == lines[0].count + lines[1].count)
            #expect(torn.byteCount == tornBytes.count)
            #expect(torn.tornFile == segment.replacingOccurrences(of: ".log", with: ".torn"))
            #expect(try fileBytes(torn.tornFile) == tornBytes)
            #expect(try permissions(torn.tornFile) == 0o600)
            #expect(!FileManager.default.fileExists(atPath: segment))

            // Set aside once: a second replay neither applies nor reports anything.
            let again = spool.replay { applied.append($0.tokenID) }
            #expect(again.torn.isEmpty)
            #expect(applied == ["t1", "t2"])
        }
    }

    @Test func aTornTailWithoutNewlineIsSetAsideEvenWhenItsJSONIsWhole() throws {
        try withSpoolDirectory { directory in
            let (spool, _, _) = try damagedSpool(directory) { lines in
                lines[0] + lines[1] + lines[2].dropLast()
            }
            var applied: [String] = []
            let report = spool.replay { applied.append($0.tokenID) }
            #expect(applied == ["t1", "t2"])
            #expect(report.torn.map(\.reason) == [.tornTail])
        }
    }

    @Test func aChangedByteFailsTheChecksumAndOnlyThatRecordIsSetAside() throws {
        try withSpoolDirectory { directory in
            var corrupted: [UInt8] = []
            let (spool, segment, lines) = try damagedSpool(directory) { lines in
                // Flip one bit inside the JSON of the middle record (a letter of `aud`).
                corrupted = lines[1]
                let marker = Array("\"aud\":\"com".utf8)
                let at = (0...(corrupted.count - marker.count)).first {
                    Array(corrupted[$0..<($0 + marker.count)]) == marker
                }!
                corrupted[at + marker.count - 1] ^= 0x01
                return lines[0] + corrupted + lines[2]
            }
            #expect(spool.depth == 2)
            var applied: [String] = []
            let report = spool.replay { applied.append($0.tokenID) }
            #expect(applied == ["t1", "t3"])
            try #require(report.torn.count == 1)
            #expect(report.torn[0].reason == .checksumMismatch)
            #expect(report.torn[0].offset == lines[0].count)
            #expect(report.torn[0].byteCount == lines[1].count)
            #expect(try fileBytes(report.torn[0].tornFile) == corrupted)
            #expect(!FileManager.default.fileExists(atPath: segment))
        }
    }

    @Test func aWrongLengthPrefixIsMalformed() throws {
        try withSpoolDirectory { directory in
            let (spool, _, _) = try damagedSpool(directory) { lines in
                var changed = lines[0]
                // The length digits come first; "1xx" becomes "9xx".
                changed[0] = UInt8(ascii: "9")
                return changed + lines[1] + lines[2]
            }
            var applied: [String] = []
            let report = spool.replay { applied.append($0.tokenID) }
            #expect(applied == ["t2", "t3"])
            #expect(report.torn.map(\.reason) == [.malformed])
        }
    }

    /// Every prefix of a record line, and a line that ends right after the checksum,
    /// is set aside as damage: never a crash (the reader once indexed past the line).
    @Test(arguments: ["5 abcdefgh", "5 abcdefgh ", "5", "5 ", "x abcdefgh {}", "2 0000000 {}"])
    func aShortOrShapelessLineIsMalformedNotACrash(_ line: String) throws {
        try withSpoolDirectory { directory in
            let (spool, _, _) = try damagedSpool(directory) { lines in
                lines[0] + Array((line + "\n").utf8) + lines[2]
            }
            var applied: [String] = []
            let report = spool.replay { applied.append($0.tokenID) }
            #expect(applied == ["t1", "t3"])
            #expect(report.torn.map(\.reason) == [.malformed])
        }
    }

    /// A line far longer than any record (5 MB, no newline until its end) is set aside as
    /// malformed in bounded pieces, and the records around it replay.
    @Test func aHugeLineIsSetAsideAndTheRecordsAroundItReplay() throws {
        try withSpoolDirectory { directory in
            let huge = [UInt8](repeating: UInt8(ascii: "x"), count: 5_000_000) + [0x0A]
            let (spool, _, _) = try damagedSpool(directory) { lines in lines[0] + huge + lines[2] }
            var applied: [String] = []
            let report = spool.replay { applied.append($0.tokenID) }
            #expect(applied == ["t1", "t3"])
            #expect(report.torn.map(\.reason) == [.malformed])
            #expect(report.torn.first?.byteCount == huge.count)
            #expect(try fileBytes(report.torn[0].tornFile) == huge)
        }
    }
}
