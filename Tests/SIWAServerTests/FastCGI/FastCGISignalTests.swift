import Foundation
import Glibc
import SIWAFastCGIClient
import SIWASupport
import SIWATestKit
import Testing

@testable import SIWAFastCGI

@Suite("FastCGISignals", .serialized)
struct FastCGISignalTests {
    private typealias Kit = FastCGITestKit

    /// The installed handler of `signal`, as a number, to see whether it changed.
    private static func handlerIdentity(_ signal: Int32) -> Int {
        var action = sigaction()
        sigaction(signal, nil, &action)
        return unsafeBitCast(action.__sigaction_handler, to: Int.self)
    }

    @Test("SIGTERM, then SIGINT, stop the service group: the request in flight finishes and the old handlers come back")
    func signalsStopRun() throws {
        for signal in [SIGTERM, SIGINT] {
            let directory = Kit.TemporaryDirectory()
            defer { directory.remove() }
            let path = directory.path + "/sig.sock"
            let before = Self.handlerIdentity(signal)
            let entered = DispatchSemaphore(value: 0)
            let stopping = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            // The handler holds its request until the test lets it go, after the signal has
            // taken effect: the request is in flight across the stop by construction, not by
            // a sleep that a slow machine could outlast. shutdownTimeout is far above the
            // few steps between the release and the end, so "drained" is the proof.
            let server = try FastCGIServer(
                configuration: .init(address: .unixSocket(path: path), workerCount: 2, shutdownTimeout: .seconds(30)),
                handler: { _ in
                    entered.signal()
                    _ = release.wait(timeout: .now() + 30)
                    return FastCGIResponse(status: 200, contentType: "text/plain", body: "finished")
                })
            let group = ServiceGroup()
            try group.handleSignals()
            try group.start(server)
            let run = Kit.BackgroundCall { () -> String in
                let stopped = group.run(shutdownTimeout: .seconds(30)) { _, _ in stopping.signal() }
                guard stopped.cause == .signal(signal) else { return "stopped by \(stopped.cause)" }
                return stopped.allReturned && server.hasDrained ? "drained" : "timed out"
            }
            // Never send the signal before our handler is in place: the default action would end the test run.
            let deadline = ContinuousClock.now.advanced(by: .seconds(10))
            while Self.handlerIdentity(signal) == before && ContinuousClock.now < deadline { usleep(10_000) }
            guard Self.handlerIdentity(signal) != before else {
                group.stop(until: .now + .seconds(10))
                Issue.record("the group did not install a handler for signal \(signal)")
                return
            }
            let call = Kit.BackgroundCall { () -> String in
                let response = try? FastCGIClient(.unixSocket(path)).send(
                    params: FastCGIClient.params(method: "GET", uri: "/"))
                return response.map { "\($0.status) \($0.bodyText)" } ?? "failed"
            }
            #expect(entered.wait(timeout: .now() + 10) == .success)
            kill(getpid(), signal)
            // The signal stopped the group: the server is draining, and waits for the request it holds.
            #expect(stopping.wait(timeout: .now() + 10) == .success, "the signal asks the group to stop")
            #expect(run.wait(seconds: 0) == nil, "the group returned with a request in flight")
            release.signal()
            #expect(run.wait(seconds: 30) == "drained")
            #expect(call.wait(seconds: 10) == "200 finished")
            #expect(Self.handlerIdentity(signal) == before, "the group restores the previous handler")
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }

    /// Waits until asked to stop.
    private final class Waiting: Service {
        let name = "waiting"
        let task: PeriodicTask
        init(task: PeriodicTask) { self.task = task }
        func run() { task.run { .seconds(3600) } }
        func requestStop() { task.requestStop() }
    }

    @Test("SIGHUP runs the group's hang-up handler and stops nothing; SIGTERM then stops the group")
    func hangUpStopsNothing() throws {
        let before = Self.handlerIdentity(SIGHUP)
        let group = ServiceGroup()
        let hangUps = DispatchSemaphore(value: 0)
        try group.handleSignals(onHangUp: { hangUps.signal() })
        let task = PeriodicTask()
        let service = Waiting(task: task)
        group.start(service)
        let run = Kit.BackgroundCall { group.run(shutdownTimeout: .seconds(10)) }
        kill(getpid(), SIGHUP)
        #expect(hangUps.wait(timeout: .now() + 10) == .success, "SIGHUP runs the handler")
        #expect(run.wait(seconds: 0) == nil, "SIGHUP stopped the group")
        #expect(!task.isStopRequested)
        kill(getpid(), SIGTERM)
        #expect(run.wait(seconds: 10) == ServiceGroup.Stopped(cause: .signal(SIGTERM), allReturned: true))
        #expect(task.isStopRequested)
        #expect(Self.handlerIdentity(SIGHUP) == before, "the group restores the previous handler")
    }
}
