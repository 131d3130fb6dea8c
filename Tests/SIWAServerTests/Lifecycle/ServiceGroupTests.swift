import Foundation
import SIWASupport
import Synchronization
import Testing

/// The lifecycle of serve's background services, in process: a stop asks the services
/// last started first, and every one must be back by the one deadline.
@Suite("Service group")
struct ServiceGroupTests {
    final class Journal: Sendable {
        private let entries = Mutex<[String]>([])
        func append(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
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

    @Test("a stop asks the services last started first, and waits until each has returned")
    func stopsInReverseOrder() {
        let journal = Journal()
        let group = ServiceGroup()
        let services = ["first", "second", "third"].map { Recorder($0, journal: journal) }
        for service in services { group.start(service) }
        for service in services { #expect(service.running.wait(until: .now + .seconds(10))) }
        #expect(group.stop(until: .now + .seconds(10)))
        // Once stop has returned, every service has: each asked (last started first) and each
        // back after it was asked. A service may return before the next one is asked (its
        // thread runs on while the group asks the others), so only those orders are fixed.
        let entries = journal.all
        #expect(entries.filter { $0.hasPrefix("asked") } == ["asked third", "asked second", "asked first"])
        #expect(entries.count == 6)
        for name in ["first", "second", "third"] {
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
