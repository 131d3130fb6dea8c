import Foundation
import SIWASupport
import SIWATestSupport
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
        let began = ContinuousClock.now
        let deadline = began + .seconds(1)
        #expect(!group.stop(until: deadline))
        let took = ContinuousClock.now - began
        // Back at the deadline, not later (the margin is for a loaded machine).
        #expect(took >= .seconds(1) && took < .seconds(3), "took \(took)")
        // The others were asked once nine tenths had passed, not before, and before stop
        // returned (an upper bound of the deadline itself would time the stop thread's wake).
        let asked = journal.instant(of: "asked second").map { $0 - began }
        #expect(
            asked.map { $0 >= .milliseconds(900) && $0 <= took } == true,
            "asked after \(String(describing: asked)), stop back after \(took)")
        // Asked last started first; each back after it was asked (the second may return before
        // the first is asked: both are asked at once, the group does not wait in between).
        // stop does not wait for them past its deadline: their return is waited for here.
        #expect(waitUntil(timeout: 10) { journal.all.filter { $0.hasPrefix("returned") }.count == 2 })
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
        let slow = Recorder("slow", journal: journal, linger: Duration.seconds(3))
        group.start(quick)
        group.start(slow)
        #expect(quick.running.wait(until: .now + .seconds(10)))
        #expect(slow.running.wait(until: .now + .seconds(10)))
        let started = ContinuousClock.now
        #expect(!group.stop(until: started + .milliseconds(300)))
        let took = ContinuousClock.now - started
        #expect(took >= .milliseconds(300) && took < .seconds(2))
        // slow lingers 3 s after it was asked. quick was asked at nine tenths and returns at
        // once; stop did not wait for that past its deadline, so it is waited for here.
        #expect(!journal.all.contains("returned slow"))
        #expect(waitUntil(timeout: 10) { journal.all.contains("returned quick") })
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
