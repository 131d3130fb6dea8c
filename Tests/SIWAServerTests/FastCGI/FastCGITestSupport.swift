import Foundation
import Glibc
import SIWAFastCGIClient
import SIWATestKit

@testable import SIWAFastCGI

/// Helpers of the FastCGI suites, namespaced so they cannot clash with other suites' helpers.
enum FastCGITestKit {
    /// A value shared between a handler thread and the test, behind a lock.
    final class LockedBox<Value>: @unchecked Sendable {
        private let lock = NSLock()
        private var value: Value

        init(_ value: Value) { self.value = value }

        func withValue<Result>(_ body: (inout Value) -> Result) -> Result {
            lock.lock()
            defer { lock.unlock() }
            return body(&value)
        }

        var current: Value { withValue { $0 } }
    }

    /// A fresh directory under the system temp dir, removed by `remove()`.
    struct TemporaryDirectory {
        let path: String

        init() {
            // Short, because a unix socket path must fit in 108 bytes.
            path = NSTemporaryDirectory() + "fcgi-" + UUID().uuidString.prefix(8).lowercased()
            try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }

        func remove() { try? FileManager.default.removeItem(atPath: path) }
    }

    /// Starts a server on a temp unix socket, runs `body`, and always stops the server and
    /// removes the directory, also when `body` throws.
    static func withServer(
        workerCount: Int = 2, maximumBodyBytes: Int = 64 * 1024, mode: UInt32 = 0o660,
        handler: @escaping FastCGIServer.Handler,
        _ body: (FastCGIServer, FastCGIClient, String) throws -> Void
    ) throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let socketPath = directory.path + "/fcgi.sock"
        let server = try FastCGIServer(
            configuration: FastCGIServerConfiguration(
                address: .unixSocket(path: socketPath, mode: mode), workerCount: workerCount,
                maximumBodyBytes: maximumBodyBytes, shutdownTimeout: .seconds(10)),
            handler: handler)
        try server.start()
        defer { server.stop(timeout: .seconds(10)) }
        try body(server, FastCGIClient(.unixSocket(socketPath), timeout: .seconds(10)), socketPath)
    }

    /// Seconds elapsed while running `body`.
    static func measure(_ body: () throws -> Void) rethrows -> Double {
        let start = ContinuousClock.now
        try body()
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    /// Runs `body` on a new thread; `wait` returns its result, bounded in time.
    final class BackgroundCall<Result: Sendable>: @unchecked Sendable {
        private let done = DispatchSemaphore(value: 0)
        private let box = LockedBox<Result?>(nil)

        init(_ body: @escaping @Sendable () -> Result) {
            let box = box
            let done = done
            Thread {
                let result = body()
                box.withValue { $0 = result }
                done.signal()
            }.start()
        }

        /// The result, or nil if `body` is still running after `seconds`. Asked again, a
        /// finished call answers at once.
        func wait(seconds: Double) -> Result? {
            guard done.wait(timeout: .now() + seconds) == .success else { return nil }
            done.signal()
            return box.current
        }
    }
}
