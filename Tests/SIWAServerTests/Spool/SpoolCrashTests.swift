import Foundation
import SIWAServer
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

    /// Crash while record `crashAt` is being applied: applied in Redis, position not yet saved.
    @Test(arguments: [1, 3, 5])
    func aCrashBetweenApplyAndCommitReappliesOnlyThatRecord(crashAt: Int) throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory)
            for index in 1...5 { try spool.append(spoolNotification(index)) }
            var atCrash: [String: [UInt8]] = [:]
            var appliedBeforeCrash: [String] = []
            let report = spool.replay { notification in
                appliedBeforeCrash.append(notification.tokenID)
                if notification.tokenID == "t\(crashAt)" { atCrash = try snapshot(directory) }
            }
            #expect(report.applied == 5)
            try #require(!atCrash.isEmpty)

            try withSpoolDirectory { copy in
                try restore(atCrash, into: copy)
                let restarted = try NotificationSpool(directory: copy)
                #expect(restarted.depth == 5 - crashAt + 1)
                var appliedAfterRestart: [String] = []
                let resumed = restarted.replay { appliedAfterRestart.append($0.tokenID) }
                // Nothing lost, and only the record in flight at the crash is applied twice.
                #expect(appliedAfterRestart == (crashAt...5).map { "t\($0)" })
                #expect(resumed.isComplete)
                #expect(restarted.depth == 0)
            }
        }
    }

    @Test func aDamagedPositionFileMeansReapplyingNeverLosing() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory)
            for index in 1...4 { try spool.append(spoolNotification(index)) }
            var atCrash: [String: [UInt8]] = [:]
            _ = spool.replay { notification in
                if notification.tokenID == "t3" { atCrash = try snapshot(directory) }
            }
            try #require(atCrash["replay-position"] != nil)
            // A bit flip in the saved offset: its checksum no longer matches.
            atCrash["replay-position"]![2] ^= 0x01
            try withSpoolDirectory { copy in
                try restore(atCrash, into: copy)
                let restarted = try NotificationSpool(directory: copy)
                var applied: [String] = []
                _ = restarted.replay { applied.append($0.tokenID) }
                #expect(applied == ["t1", "t2", "t3", "t4"])
            }
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
