import Foundation
import SIWASupport
import Synchronization
import Testing

/// A nudge ends a periodic task's wait; with `nudgeSpacing`, a burst of nudges is gathered
/// into one step no sooner than the spacing after the last step began (the deletion-duty
/// reading, nudged by every `account-deleted`, reads at most once a second).
@Suite("PeriodicTask: nudges end a wait, gathered by nudgeSpacing")
struct PeriodicTaskTests {
    /// Runs `task` on a thread of its own, each step's start recorded; the wait between
    /// steps is an hour, so only nudges start a step after the first.
    final class Runner: Sendable {
        let task: PeriodicTask
        let starts = Mutex<[ContinuousClock.Instant]>([])
        let finished = Latch()

        init(_ task: PeriodicTask) {
            self.task = task
            Thread { [self] in
                task.run {
                    starts.withLock { $0.append(.now) }
                    return .seconds(3600)
                }
                finished.open()
            }.start()
        }

        var count: Int { starts.withLock { $0.count } }
        func stop() {
            task.requestStop()
            _ = finished.wait(until: .now + .seconds(10))
        }
    }

    @Test("without spacing, a nudge starts the next step at once")
    func nudgeStartsAStep() {
        let runner = Runner(PeriodicTask())
        defer { runner.stop() }
        #expect(waitUntil(timeout: 10) { runner.count == 1 })
        runner.task.nudge()
        #expect(waitUntil(timeout: 10) { runner.count == 2 })
    }

    @Test("with spacing 1 s, 50 nudges at once make one step, no sooner than 1 s after the last")
    func spacingGathersNudges() {
        let runner = Runner(PeriodicTask(nudgeSpacing: .seconds(1)))
        defer { runner.stop() }
        #expect(waitUntil(timeout: 10) { runner.count == 1 })
        for _ in 0..<50 { runner.task.nudge() }
        #expect(waitUntil(timeout: 10) { runner.count == 2 })
        let starts = runner.starts.withLock { $0 }
        #expect(starts[0].duration(to: starts[1]) >= .seconds(1), "\(starts[0].duration(to: starts[1]))")
        // The rest of the burst was gathered into that step: no third step follows it.
        // (The next one would come after another second at the soonest; a second and a
        // half is the look.)
        let afterSecond = ContinuousClock.now
        while ContinuousClock.now - afterSecond < .milliseconds(1500) { usleep(50_000) }
        #expect(runner.count == 2)
    }
}
