import Foundation
import SIWATestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A command started with standard input, output or error closed (`2>&-`, a supervisor
/// that closes them): the first descriptor it opens would take that number, and its log
/// lines (written to descriptor 2) would go into that socket or file, such as serve's
/// Redis connection. Each of the three is held by /dev/null before anything is opened.
@Suite("commands started with descriptors 0, 1 and 2 closed", .serialized)
struct ClosedDescriptorTests {
    @Test("serve started with <&- >&- 2>&-: descriptors 0, 1 and 2 are /dev/null, never Redis or the listener")
    func serveWithClosedDescriptors() throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-fd-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let socket = directory.appendingPathComponent("fcgi.sock").path
        // The shell closes the three descriptors, then becomes serve.
        let serve = try EndpointProcess(
            ["serve"],
            environment: [
                "PATH": "/usr/bin:/bin", "SIWA_CLIENT_IDS": "com.example.app", "SIWA_REDIS_URL": redis.url(),
                "SIWA_FCGI_SOCKET": socket, "SIWA_JWKS_URL": "http://127.0.0.1:9/auth/keys",
                "SIWA_SPOOL_DIR": directory.appendingPathComponent("spool").path,
            ], launcher: ["/bin/sh", "-c", "exec \"$0\" \"$@\" <&- >&- 2>&-"])
        defer { serve.stop() }
        let process = serve.process
        #expect(waitUntil(timeout: 20) { FileManager.default.fileExists(atPath: socket) }, "serve started")
        let descriptors = (0...2).map { number in
            (try? FileManager.default.destinationOfSymbolicLink(
                atPath: "/proc/\(process.processIdentifier)/fd/\(number)")) ?? "-"
        }
        #expect(descriptors == ["/dev/null", "/dev/null", "/dev/null"])
        kill(process.processIdentifier, SIGTERM)
        #expect(waitUntil(timeout: 20) { !process.isRunning })
    }
}
