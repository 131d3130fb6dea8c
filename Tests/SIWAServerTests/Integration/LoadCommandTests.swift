import Foundation
import Glibc
import SIWATestKit
import Testing

/// `siwa-endpoint load` against a real stack (redis-server, nginx serving the JWKS over
/// HTTPS, the real `serve`). Counts and outcomes only: speed is measured by
/// scripts/bench-serve, never asserted in a test.
@Suite("Load command", .serialized)
struct LoadCommandTests {
    /// The output and exit status of one `siwa-endpoint load` run.
    struct Run {
        let status: Int32
        let output: String

        /// The `key=value` fields of the first line that starts with `prefix`.
        func fields(ofLineStartingWith prefix: String) -> [String: String] {
            guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) else { return [:] }
            return line.split(separator: " ").reduce(into: [:]) { fields, word in
                let parts = word.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
            }
        }
    }

    struct Timeout: Error, CustomStringConvertible { let description: String }

    /// Runs the real binary's `load` with the stack's key written to a PEM file; bounded at 60 s.
    static func load(_ stack: ServeStack, clientID: String = ServeStack.clientID, extra: [String]) throws -> Run {
        let keyPath = stack.directory.appendingPathComponent("load-key.pem").path
        try Data(try stack.key.privateKey.pem().utf8).write(to: URL(fileURLWithPath: keyPath))
        let outputURL = stack.directory.appendingPathComponent("load-\(UUID().uuidString).out")
        // Standard output and error in one file, in the order written.
        let load = try EndpointProcess(
            [
                "load", "--socket", stack.socketPath, "--key", keyPath, "--kid", stack.key.keyID, "--client-id",
                clientID,
            ] + extra, environment: ProcessInfo.processInfo.environment, standardOutput: outputURL,
            standardError: outputURL)
        guard let status = load.waitForExit(timeout: 60) else {
            load.stop()
            throw Timeout(description: "load did not finish within 60 s")
        }
        return Run(status: status, output: try String(contentsOf: outputURL, encoding: .utf8))
    }

    @Test("20 notifications and 20 health checks: every one 2xx, every notification applied, 20 stream entries")
    func smallRun() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let run = try Self.load(stack, extra: ["--count", "20", "--concurrency", "2"])
        #expect(run.status == 0, "\(run.output)")

        let baseline = run.fields(ofLineStartingWith: "phase A")
        #expect(baseline["requests"] == "20")
        #expect(baseline["non_2xx"] == "0")
        let notifications = run.fields(ofLineStartingWith: "phase B")
        #expect(notifications["requests"] == "20")
        #expect(notifications["non_2xx"] == "0")
        // Each phase's outcome line follows its figures line: all healthy, all applied.
        let outcomes = run.output.split(separator: "\n").filter { $0.hasPrefix("  outcomes:") }
        #expect(outcomes == ["  outcomes: 200:ok=20", "  outcomes: 200:applied=20"])
        #expect(run.output.contains("ratio B/A of requests/s: "))

        #expect(try stack.streamLength() == 20)
        #expect(try stack.redisSnapshot().filter { $0.hasPrefix("siwa:user:") }.count == 20)
    }

    @Test("notifications for a client ID the responder does not serve: refused, exit status 1, Redis untouched")
    func refusedRun() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let run = try Self.load(stack, clientID: "com.example.other", extra: ["--count", "6", "--concurrency", "2"])
        #expect(run.status == 1, "\(run.output)")
        #expect(run.fields(ofLineStartingWith: "phase A")["non_2xx"] == "0")
        let notifications = run.fields(ofLineStartingWith: "phase B")
        #expect(notifications["requests"] == "6")
        #expect(notifications["non_2xx"] == "6")
        let outcomes = run.output.split(separator: "\n").filter { $0.hasPrefix("  outcomes:") }
        #expect(outcomes == ["  outcomes: 200:ok=6", "  outcomes: 403:refused/aud_not_served=6"])
        #expect(try stack.streamLength() == 0)
    }

    @Test("counts above the bound, and no concurrency, are refused before any request (exit status 2)")
    func bounds() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let tooMany = try Self.load(stack, extra: ["--count", "100001"])
        #expect(tooMany.status == 2)
        #expect(tooMany.output.contains("--count must be between 1 and 100000"))
        let noThreads = try Self.load(stack, extra: ["--count", "10", "--concurrency", "0"])
        #expect(noThreads.status == 2)
        #expect(try stack.streamLength() == 0)
    }
}
