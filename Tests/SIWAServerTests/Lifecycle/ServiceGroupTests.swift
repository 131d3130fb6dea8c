import Foundation
import SIWASupport
import Synchronization
import Testing

/// The lifecycle of serve's background services, in process: a stop asks the services
/// last started first, and every one must be back by the one deadline.
@Suite("Service group")
struct ServiceGroupTests {
    final class Journal: Sendable {
        private let entries = Mutex<[(entry: String, at: ContinuousClock.Instant)]>([])
        func append(_ entry: String) { entries.withLock { $0.append((entry, .now)) } }
        var all: [String] { entries.withLock { $0.map(\.entry) } }
        /// When `entry` was written first.
        func instant(of entry: String) -> ContinuousClock.Instant? {
            entries.withLock { $0.first { $0.entry == entry }?.at }
        }
    }

    /// Records what happens to it in a shared journal; runs until asked to stop, then
    /// lingers `linger` before returning (a step that takes its time).
    final class Recorder: Service {
        let name: String
        let linger: Duration
        let journal: Journal
        private let task = PeriodicTask()
        let running = Latch()

        init(_ name: String, journal: Journal, linger: Duration = .zero) {
            self.name = name
            self.journal = journal
            self.linger = linger
        }

        func run() {
            running.open()
            task.run { .seconds(3600) }
            Thread.sleep(
                forTimeInterval: Double(linger.components.seconds) + Double(linger.components.attoseconds) / 1e18)
            journal.append("returned \(name)")
        }

        func requestStop() {
            journal.append("asked \(name)")
            task.requestStop()
        }
    }

    @Test("a stop asks each service only once the one started after it has returned, last started first")
    func stopsOneByOneInReverseOrder() {
        let journal = Journal()
        let group = ServiceGroup()
        // Each lingers after it is asked (a drain that takes its time): asked all at once,
        // the three would be asked before any returned.
        let services = ["first", "second", "third"].map { Recorder($0, journal: journal, linger: .milliseconds(100)) }
        for service in services { group.start(service) }
        for service in services { #expect(service.running.wait(until: .now + .seconds(10))) }
        #expect(group.stop(until: .now + .seconds(10)))
        #expect(
            journal.all == [
                "asked third", "returned third", "asked second", "returned second", "asked first", "returned first",
            ])
    }

    /// Runs until `release` opens, whatever it is asked: a drain stuck past any deadline.
    final class Stuck: Service {
        let name = "stuck"
        let journal: Journal
        let running = Latch()
        let release = Latch()

        init(journal: Journal) { self.journal = journal }

        func run() {
            running.open()
            release.wait()
        }

        func requestStop() { journal.append("asked stuck") }
    }

    @Test(
        "a service that never returns: the services started before it are asked at nine tenths of the deadline, and are back by it"
    )
    func stuckServiceDoesNotKeepTheOthersFromStopping() {
        let journal = Journal()
        let group = ServiceGroup()
        let first = Recorder("first", journal: journal)
        let second = Recorder("second", journal: journal)
        let stuck = Stuck(journal: journal)
        defer { stuck.release.open() }
        group.start(first)
        group.start(second)
        group.start(stuck)
        for latch in [first.running, second.running, stuck.running] { #expect(latch.wait(until: .now + .seconds(10))) }
        // A 10 s deadline: its last tenth, a second, is time enough on a loaded machine for
        // the stop thread to wake at nine tenths and the others to return.
        let began = ContinuousClock.now
        let deadline = began + .seconds(10)
        #expect(!group.stop(until: deadline))
        let returnedAt = ContinuousClock.now
        let took = returnedAt - began
        // Back at the deadline, not later (the margin is for a loaded machine).
        #expect(took >= .seconds(10) && took < .seconds(13), "took \(took)")
        // The others were asked once nine tenths had passed, not before, and well before the
        // deadline; and they were back before stop returned.
        let asked = journal.instant(of: "asked second").map { $0 - began }
        #expect(
            asked.map { $0 >= .seconds(9) && $0 < .milliseconds(9800) } == true,
            "asked after \(String(describing: asked))")
        for name in ["first", "second"] {
            let back = journal.instant(of: "returned \(name)")
            #expect(back.map { $0 <= returnedAt } == true, "\(name) back \(String(describing: back)) after stop")
        }
        // Asked last started first; each back after it was asked (the second may return before
        // the first is asked: both are asked at once, the group does not wait in between).
        let entries = journal.all
        #expect(entries.filter { $0.hasPrefix("asked") } == ["asked stuck", "asked second", "asked first"])
        #expect(entries.count == 5, "\(entries)")
        for name in ["first", "second"] {
            let asked = entries.firstIndex(of: "asked \(name)")
            let returned = entries.firstIndex(of: "returned \(name)")
            #expect(asked != nil && returned != nil && asked! < returned!, "\(entries)")
        }
    }

    @Test("a service still running at the deadline: stop returns false at the deadline, not later")
    func deadlineBoundsTheStop() {
        let journal = Journal()
        let group = ServiceGroup()
        let quick = Recorder("quick", journal: journal)
        let slow = Recorder("slow", journal: journal, linger: Duration.seconds(8))
        group.start(quick)
        group.start(slow)
        #expect(quick.running.wait(until: .now + .seconds(10)))
        #expect(slow.running.wait(until: .now + .seconds(10)))
        // A 3 s deadline: quick is asked at nine tenths and has the last 300 ms to return
        // (time enough on a loaded machine); slow lingers 8 s after it was asked.
        let started = ContinuousClock.now
        #expect(!group.stop(until: started + .seconds(3)))
        let took = ContinuousClock.now - started
        #expect(took >= .seconds(3) && took < .seconds(5), "took \(took)")
        #expect(journal.all.contains("returned quick"))
        #expect(!journal.all.contains("returned slow"))
        // It returns in the end, and a second stop then finds every service back.
        #expect(group.stop(until: .now + .seconds(10)))
    }

    /// Returns at once, without being asked: a service that failed after its start.
    final class Quitter: Service {
        let name = "quitter"
        func run() {}
        func requestStop() {}
    }

    @Test("a service that returns on its own stops the group, named as the cause, and the others are stopped")
    func serviceReturningEarlyStopsTheGroup() {
        let journal = Journal()
        let group = ServiceGroup()
        let steady = Recorder("steady", journal: journal)
        group.start(steady)
        #expect(steady.running.wait(until: .now + .seconds(10)))
        group.start(Quitter())
        // run() returns only because the quitter did: nothing else asks the group to stop.
        let run = FastCGITestKit.BackgroundCall { group.run(shutdownTimeout: .seconds(10)) }
        let stopped = run.wait(seconds: 30)
        #expect(stopped == ServiceGroup.Stopped(cause: .serviceReturned("quitter"), allReturned: true))
        if stopped == nil { group.stop(until: .now + .seconds(10)) }
        #expect(journal.all == ["asked steady", "returned steady"])
    }

    @Test("requestStop() ends run() with the cause `requested`, every service back")
    func requestStopEndsRun() {
        let journal = Journal()
        let group = ServiceGroup()
        let only = Recorder("only", journal: journal)
        group.start(only)
        #expect(only.running.wait(until: .now + .seconds(10)))
        group.requestStop()
        #expect(group.run(shutdownTimeout: .seconds(10)) == ServiceGroup.Stopped(cause: .requested, allReturned: true))
        #expect(journal.all == ["asked only", "returned only"])
    }
}
