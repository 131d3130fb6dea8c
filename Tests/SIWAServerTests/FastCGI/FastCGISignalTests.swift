import Foundation
import Glibc
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
            let server = try FastCGIServer(
                configuration: .init(address: .unixSocket(path: path), workerCount: 2, shutdownTimeout: .seconds(10)),
                handler: { _ in
                    entered.signal()
                    usleep(800_000)
                    return FastCGIResponse(status: 200, contentType: "text/plain", body: "finished")
                })
            let run = Kit.BackgroundCall { () -> String in
                do { return try server.run(handlingSignals: true) ? "drained" : "timed out" } catch {
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
            var outcome: String?
            let elapsed = Kit.measure {
                kill(getpid(), signal)
                outcome = run.wait(seconds: 12)
            }
            #expect(outcome == "drained")
            #expect(elapsed < 5)
            #expect(call.wait(seconds: 10) == "200 finished")
            #expect(Self.handlerIdentity(signal) == before, "run() restores the previous handler")
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }
}
