import Foundation
import SIWASpool
import SIWAVerification
import Testing

@Suite("SpoolAppendReplay")
struct SpoolAppendReplayTests {
    @Test func appendedRecordsReplayInOrderWithEveryField() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory)
            #expect(spool.depth == 0)
            let notifications = (1...10).map { spoolNotification($0) }
            for notification in notifications { try spool.append(notification) }
            #expect(spool.depth == 10)

            var applied: [VerifiedNotification] = []
            let report = spool.replay { applied.append($0) }
            #expect(applied == notifications)
            // Equatable compares fields one by one; check the enum survived too.
            #expect(applied.map(\.type) == notifications.map(\.type))
            #expect(report.taken == 10)
            #expect(report.torn.isEmpty)
            #expect(report.isComplete)
            #expect(report.remaining == 0)
            #expect(spool.depth == 0)
            // Fully replayed segments are deleted.
            #expect(try segmentNames(directory).isEmpty)

            var second = 0
            let again = spool.replay { _ in second += 1 }
            #expect(second == 0)
            #expect(again.taken == 0)
            #expect(again.isComplete)
        }
    }

    @Test func recordsOfAnEarlierRunAreCountedAndReplayedByTheNext() throws {
        try withSpoolDirectory { directory in
            let notifications = (1...4).map { spoolNotification($0) }
            do {
                let first = try NotificationSpool(directory: directory)
                for notification in notifications { try first.append(notification) }
            }
            let second = try NotificationSpool(directory: directory)
            #expect(second.depth == 4)
            var applied: [VerifiedNotification] = []
            let report = second.replay { applied.append($0) }
            #expect(applied == notifications)
            #expect(report.taken == 4)
            #expect(second.depth == 0)
        }
    }

    @Test func restartsWithoutRecordsLeaveNoEmptySegmentsBehind() throws {
        try withSpoolDirectory { directory in
            for _ in 0..<3 { _ = try NotificationSpool(directory: directory) }
            // Each start creates one segment and the next start deletes it while empty.
            #expect(try segmentNames(directory).count == 1)
        }
    }

    @Test func appendsAfterAReplayGoToANewSegmentAndReplayNextTime() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory)
            try spool.append(spoolNotification(1))
            var applied: [String] = []
            _ = spool.replay { applied.append($0.tokenID) }
            try spool.append(spoolNotification(2))
            try spool.append(spoolNotification(3))
            #expect(spool.depth == 2)
            _ = spool.replay { applied.append($0.tokenID) }
            #expect(applied == ["t1", "t2", "t3"])
            #expect(spool.depth == 0)
        }
    }
}
