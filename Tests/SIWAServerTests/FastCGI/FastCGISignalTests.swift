import Foundation
import Glibc
import SIWAFastCGIClient
import SIWATestKit
import Testing

@testable import SIWAFastCGI
@testable import SIWAServer

@Suite("FastCGISignals")
struct FastCGISignalTests {
    private typealias Kit = FastCGITestKit

    /// The installed handler of `signal`, as a number, to see whether it changed.
    private static func handlerIdentity(_ signal: Int32) -> Int {
        var action = sigaction()
        sigaction(signal, nil, &action)
        return unsafeBitCast(action.__sigaction_handler, to: Int.self)
    }

    @Test("SIGTERM, then SIGINT, stop run(): the request in flight finishes and the old handlers come back")
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
            let run = Kit.BackgroundCall { () -> String in
                do {
                    return try server.run(handlingSignals: true, whenStopping: { _ in stopping.signal() })
                        ? "drained" : "timed out"
                } catch {
                    return "threw \(error)"
                }
            }
            // Never send the signal before our handler is in place: the default action would end the test run.
            let deadline = ContinuousClock.now.advanced(by: .seconds(10))
            while Self.handlerIdentity(signal) == before && ContinuousClock.now < deadline { usleep(10_000) }
            guard Self.handlerIdentity(signal) != before else {
                server.stop(timeout: .seconds(10))
                Issue.record("run() did not install a handler for signal \(signal)")
                return
            }
            let call = Kit.BackgroundCall { () -> String in
                let response = try? FastCGIClient(.unixSocket(path)).send(
                    params: FastCGIClient.params(method: "GET", uri: "/"))
                return response.map { "\($0.status) \($0.bodyText)" } ?? "failed"
            }
            #expect(entered.wait(timeout: .now() + 10) == .success)
            kill(getpid(), signal)
            // The signal stopped run(): it is draining, and it waits for the request it holds.
            #expect(stopping.wait(timeout: .now() + 10) == .success, "the signal asks run() to stop")
            #expect(run.wait(seconds: 0) == nil, "run() returned with a request in flight")
            release.signal()
            #expect(run.wait(seconds: 30) == "drained")
            #expect(call.wait(seconds: 10) == "200 finished")
            #expect(Self.handlerIdentity(signal) == before, "run() restores the previous handler")
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }
}
