import Foundation
import SIWASpool
import SIWAVerification
import Testing

@Suite("SpoolResume")
struct SpoolResumeTests {
    @Test func replayStopsAtTheFirstErrorAndResumesWithoutLossOrRepeat() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory)
            for index in 1...6 { try spool.append(spoolNotification(index)) }

            var applied: [String] = []
            var attempts: [String] = []
            let stopped = spool.replay { notification in
                attempts.append(notification.tokenID)
                if notification.tokenID == "t3" { throw RedisDown() }
                applied.append(notification.tokenID)
            }
            #expect(attempts == ["t1", "t2", "t3"])
            #expect(stopped.taken == 2)
            #expect(stopped.stop as? RedisDown == RedisDown())
            #expect(stopped.spoolError == nil)
            #expect(!stopped.isComplete)
            #expect(stopped.remaining == 4)
            #expect(spool.depth == 4)

            // New records arrive while Redis is still down; they must come after the old ones.
            try spool.append(spoolNotification(7))
            try spool.append(spoolNotification(8))
            #expect(spool.depth == 6)

            let resumed = spool.replay { applied.append($0.tokenID) }
            #expect(applied == ["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"])
            #expect(resumed.taken == 6)
            #expect(resumed.isComplete)
            #expect(spool.depth == 0)
        }
    }

    @Test func aStoppedReplayResumesInTheNextProcess() throws {
        try withSpoolDirectory { directory in
            var applied: [String] = []
            do {
                let spool = try NotificationSpool(directory: directory)
                for index in 1...6 { try spool.append(spoolNotification(index)) }
                let report = spool.replay { notification in
                    if notification.tokenID == "t4" { throw RedisDown() }
                    applied.append(notification.tokenID)
                }
                #expect(report.taken == 3)
            }
            let reopened = try NotificationSpool(directory: directory)
            #expect(reopened.depth == 3)
            let report = reopened.replay { applied.append($0.tokenID) }
            #expect(applied == ["t1", "t2", "t3", "t4", "t5", "t6"])
            #expect(report.taken == 3)
            #expect(reopened.depth == 0)
        }
    }

    @Test func severalSegmentsReplayInOrderAndResumeMidway() throws {
        try withSpoolDirectory { directory in
            var applied: [String] = []
            do {
                // A limit smaller than one record: every record gets its own segment.
                let spool = try NotificationSpool(directory: directory, segmentByteLimit: 1)
                for index in 1...10 { try spool.append(spoolNotification(index)) }
                #expect(try segmentNames(directory).count == 10)
                let report = spool.replay { notification in
                    if notification.tokenID == "t6" { throw RedisDown() }
                    applied.append(notification.tokenID)
                }
                #expect(report.taken == 5)
                #expect(try segmentNames(directory).count == 5)
            }
            let reopened = try NotificationSpool(directory: directory, segmentByteLimit: 1)
            #expect(reopened.depth == 5)
            _ = reopened.replay { applied.append($0.tokenID) }
            #expect(applied == (1...10).map { "t\($0)" })
            // The replay also removed the empty segment this start created.
            #expect(try segmentNames(directory).isEmpty)
        }
    }
}
