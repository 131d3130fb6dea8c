import Foundation
import SIWASpool
import SIWAVerification
import Testing

/// A crash is simulated by copying the spool directory's files at a chosen instant of a
/// replay (what the disk holds if the process dies then) and opening a new spool on the copy.
@Suite("SpoolCrash")
struct SpoolCrashTests {
    private func snapshot(_ directory: String) throws -> [String: [UInt8]] {
        var files: [String: [UInt8]] = [:]
        for name in try spoolFileNames(directory) { files[name] = try fileBytes(directory + "/" + name) }
        return files
    }

    private func restore(_ files: [String: [UInt8]], into directory: String) throws {
        for (name, bytes) in files {
            try #require(
                FileManager.default.createFile(
                    atPath: directory + "/" + name, contents: Data(bytes), attributes: [.posixPermissions: 0o600]))
        }
    }

    /// Crash while record `crashAt` is being applied: applied in Redis, position not yet
    /// saved. The position is saved once per batch (2 records here), so the records taken
    /// since the last save are applied again (Redis reports them as `duplicate`).
    @Test(arguments: [1, 3, 4, 5])
    func aCrashBetweenApplyAndCommitReappliesOnlyTheBatchInFlight(crashAt: Int) throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(
                directory: directory, positionBatchRecords: 2, positionBatchInterval: .seconds(3600))
            for index in 1...5 { try spool.append(spoolNotification(index)) }
            var atCrash: [String: [UInt8]] = [:]
            var appliedBeforeCrash: [String] = []
            let report = spool.replay { notification in
                appliedBeforeCrash.append(notification.tokenID)
                if notification.tokenID == "t\(crashAt)" { atCrash = try snapshot(directory) }
            }
            #expect(report.taken == 5)
            try #require(!atCrash.isEmpty)

            try withSpoolDirectory { copy in
                try restore(atCrash, into: copy)
                let restarted = try NotificationSpool(directory: copy)
                let committed = (crashAt - 1) / 2 * 2
                #expect(restarted.depth == 5 - committed)
                var appliedAfterRestart: [String] = []
                let resumed = restarted.replay { appliedAfterRestart.append($0.tokenID) }
                // Nothing lost, and only the batch in flight at the crash is applied twice.
                #expect(appliedAfterRestart == ((committed + 1)...5).map { "t\($0)" })
                #expect(resumed.isComplete)
                #expect(restarted.depth == 0)
            }
        }
    }

    /// The position file has two slots written in turn: a save torn by a crash (here, a bit
    /// flip in the newest slot) falls back to the previous position, which re-applies one
    /// record and loses none.
    @Test func aDamagedNewestPositionFallsBackToThePreviousOne() throws {
        try withSpoolDirectory { directory in
            // A save after every record, so that each slot holds a known position.
            let spool = try NotificationSpool(
                directory: directory, positionBatchRecords: 1, positionBatchInterval: .seconds(3600))
            for index in 1...4 { try spool.append(spoolNotification(index)) }
            var atCrash: [String: [UInt8]] = [:]
            _ = spool.replay { notification in
                if notification.tokenID == "t3" { atCrash = try snapshot(directory) }
            }
            // t1 and t2 are committed: generations 2 (slot 0, after t1) and 3 (slot 1, after t2).
            var position = try #require(atCrash["replay-position"])
            try #require(position.count == 128)
            position[64 + 2] ^= 0x01
            atCrash["replay-position"] = position
            try withSpoolDirectory { copy in
                try restore(atCrash, into: copy)
                let restarted = try NotificationSpool(directory: copy)
                var applied: [String] = []
                _ = restarted.replay { applied.append($0.tokenID) }
                #expect(applied == ["t2", "t3", "t4"])
            }
        }
    }

    /// A position file that exists but holds no valid position stops the spool from opening,
    /// with a message that names the file and what to do: guessing could skip records.
    @Test func anUnreadablePositionRefusesToStart() throws {
        try withSpoolDirectory { directory in
            do {
                let spool = try NotificationSpool(directory: directory)
                for index in 1...3 { try spool.append(spoolNotification(index)) }
                _ = spool.replay { notification in
                    if notification.tokenID == "t2" { throw RedisDown() }
                }
            }
            try writeBytes([UInt8](repeating: UInt8(ascii: "x"), count: 128), to: directory + "/replay-position")
            #expect {
                _ = try NotificationSpool(directory: directory)
            } throws: { error in
                let spoolError = error as? SpoolError
                return spoolError?.code == .positionUnreadable
                    && spoolError?.message.contains(directory + "/replay-position") == true
                    && spoolError?.message.contains("delete it") == true
            }
            // Unchanged: the segment and the damaged file stay for the operator.
            #expect(try fileBytes(directory + "/replay-position") == [UInt8](repeating: UInt8(ascii: "x"), count: 128))
            #expect(try segmentNames(directory).count == 1)
        }
    }

    /// A position file written by an earlier release (one line) is read and converted.
    @Test func aLegacyPositionLineIsConverted() throws {
        try withSpoolDirectory { directory in
            do {
                let spool = try NotificationSpool(directory: directory)
                for index in 1...3 { try spool.append(spoolNotification(index)) }
            }
            let segment = try onlyNonEmptySegment(directory)
            let sequence = String(segment.split(separator: "-").last!.prefix(20))
            let firstLength = recordLines(try fileBytes(segment))[0].count
            let fields = "\(UInt64(sequence)!) \(firstLength)"
            let checksum = String(CRC32Hex.of(fields), radix: 16)
            let padded = String(repeating: "0", count: 8 - checksum.count) + checksum
            try writeBytes(Array("\(fields) \(padded)\n".utf8), to: directory + "/replay-position")
            let reopened = try NotificationSpool(directory: directory)
            #expect(reopened.depth == 2)
            var applied: [String] = []
            _ = reopened.replay { applied.append($0.tokenID) }
            #expect(applied == ["t2", "t3"])
            #expect(try fileBytes(directory + "/replay-position").count == 128)
        }
    }

    @Test func aPositionForADeletedSegmentDoesNotSkipRecordsOfALaterRun() throws {
        try withSpoolDirectory { directory in
            do {
                let spool = try NotificationSpool(directory: directory)
                for index in 1...3 { try spool.append(spoolNotification(index)) }
                _ = spool.replay { _ in }
            }
            // All segments are gone, the position file remains; new records must all replay.
            #expect(try segmentNames(directory).isEmpty)
            #expect(FileManager.default.fileExists(atPath: directory + "/replay-position"))
            do {
                let restarted = try NotificationSpool(directory: directory)
                for index in 4...9 { try restarted.append(spoolNotification(index)) }
            }
            // Started again before any replay: the old position must not apply to the new segments.
            let again = try NotificationSpool(directory: directory)
            #expect(again.depth == 6)
            var applied: [String] = []
            _ = again.replay { applied.append($0.tokenID) }
            #expect(applied == (4...9).map { "t\($0)" })
        }
    }
}
