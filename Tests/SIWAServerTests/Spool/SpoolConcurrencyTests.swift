import Foundation
import SIWAVerification
import Synchronization
import Testing

@testable import SIWASpool

@Suite("SpoolConcurrency")
struct SpoolConcurrencyTests {
    @Test func concurrentAppendsAreAllPresentExactlyOnce() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory, segmentByteLimit: 16 * 1024)
            let threads = 8
            let perThread = 40
            let failures = Mutex(0)
            DispatchQueue.concurrentPerform(iterations: threads) { thread in
                for index in 0..<perThread {
                    do {
                        try spool.append(spoolNotification(index, prefix: "w\(thread)-"))
                    } catch {
                        failures.withLock { $0 += 1 }
                    }
                }
            }
            #expect(failures.withLock { $0 } == 0)
            #expect(spool.depth == threads * perThread)

            var applied: [String] = []
            let report = spool.replay { applied.append($0.tokenID) }
            #expect(report.taken == threads * perThread)
            #expect(Set(applied).count == applied.count)
            #expect(Set(applied) == Set((0..<threads).flatMap { t in (0..<perThread).map { "w\(t)-\($0)" } }))
            // Each thread's records keep that thread's order.
            for thread in 0..<threads {
                let mine = applied.filter { $0.hasPrefix("w\(thread)-") }
                #expect(mine == (0..<perThread).map { "w\(thread)-\($0)" })
            }
        }
    }

    @Test func appendsDuringReplaysAreAllAppliedOnceInOrder() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory, segmentByteLimit: 4 * 1024)
            let total = 200
            let finished = DispatchSemaphore(value: 0)
            let appendFailures = Mutex(0)
            let appender = Thread {
                for index in 0..<total {
                    do { try spool.append(spoolNotification(index)) } catch { appendFailures.withLock { $0 += 1 } }
                }
                finished.signal()
            }
            appender.start()

            var applied: [String] = []
            var appenderDone = false
            let deadline = Date().addingTimeInterval(30)
            // Replay while the appender runs; bounded by the deadline.
            while !appenderDone && Date() < deadline {
                _ = spool.replay { applied.append($0.tokenID) }
                appenderDone = finished.wait(timeout: .now() + .milliseconds(5)) == .success
            }
            // 200 appends, each fsynced, beside other test processes' fsyncs: should they
            // outlast the replays' 30 s, the appender is waited for (never left writing into
            // a directory about to be removed); the replays above ran during the appends all
            // the same.
            if !appenderDone { appenderDone = finished.wait(timeout: .now() + .seconds(120)) == .success }
            #expect(appenderDone)
            let last = spool.replay { applied.append($0.tokenID) }
            #expect(last.isComplete)
            #expect(appendFailures.withLock { $0 } == 0)
            #expect(applied == (0..<total).map { "t\($0)" })
            #expect(spool.depth == 0)
        }
    }
}
