import Foundation
import Glibc
import SIWAFastCGIClient
import SIWASpool
import SIWATestKit
import SIWAVerification
import Testing

/// SIGTERM meets one shutdown deadline (SIWA_SHUTDOWN_TIMEOUT_SECONDS) for the drain, the
/// replayer and the refresher together, even during a long replay and with a request
/// stuck on a partial body; nothing spooled is lost or applied twice. The drain comes
/// first: requests accepted before SIGTERM are answered while the services they need (the
/// breaker, the JWKS refresher) still run.
@Suite("serve: one shutdown deadline", .serialized)
struct ServeShutdownDeadlineTests {
    static let recordCount = 8000

    @Test("SIGTERM during a long replay with a stuck request exits within the deadline; every record applied once")
    func shutdownDuringReplay() throws {
        let stack = try ServeStack(
            extraEnvironment: ["SIWA_SHUTDOWN_TIMEOUT_SECONDS": "2", "SIWA_MAX_BODY_BYTES": "131072"],
            startingServe: false)
        defer { stack.shutdown() }
        // Records spooled with the spool's own API (as a Redis outage would leave them).
        try FileManager.default.createDirectory(atPath: stack.spoolDirectory, withIntermediateDirectories: true)
        do {
            let spool = try NotificationSpool(directory: stack.spoolDirectory)
            for index in 0..<Self.recordCount {
                try spool.append(
                    VerifiedNotification(
                        clientID: ServeStack.clientID, subject: "000\(index).deadline.0001", type: .consentRevoked,
                        rawType: "consent-revoked", eventTimeMilliseconds: 1_670_016_125_295 + Int64(index),
                        tokenID: "deadline-\(index)", issuedAt: 1_670_016_000, expiresAt: nil, email: nil,
                        isPrivateEmail: nil))
            }
        }
        try stack.startServe()
        guard let serve = stack.serve else { throw ServeProcess.StartFailure(description: "no serve") }
        // A request stuck on a partial body keeps the FastCGI server from draining (no
        // worker has it: the acceptor watches it for the rest). Looked at once a /healthz
        // sent after it is answered, whatever its status.
        let stuck = try Self.partialRequest(socketPath: stack.socketPath)
        defer { close(stuck) }
        #expect((try? stack.request("GET", "/healthz")) != nil)
        // The replay is under way: some records are in Redis, not all.
        #expect(stack.waitUntil(timeout: 30) { ((try? stack.streamLength()) ?? 0) > 0 })
        serve.terminate()
        let signalled = ContinuousClock.now
        let status = serve.waitForExit(timeout: 30)
        let took = ContinuousClock.now - signalled
        #expect(status == 0)
        // The deadline is 2 s; the margin is generous for a loaded machine but well below
        // the three 10 s waits run one after another that this replaces.
        #expect(took < .seconds(8), "serve took \(took) to stop")
        #expect(serve.logLines(event: "stopped").first?.contains(#""drained":false"#) == true)
        // The pass was cut at the deadline between records, not run to its end.
        let firstApplied = serve.replayedTotal("applied")
        #expect(firstApplied < Self.recordCount, "the first run applied \(firstApplied), took \(took)")
        print("first run applied \(firstApplied) of \(Self.recordCount); stop took \(took)")

        // The next start replays the rest: every record exactly once.
        try stack.startServe()
        #expect(stack.waitUntil(timeout: 60) { ((try? stack.streamLength()) ?? 0) >= Int64(Self.recordCount) })
        #expect(try stack.streamLength() == Int64(Self.recordCount))
        // The pass logs its counts after its last record is in Redis: wait for that line
        // rather than read the log the moment the stream is full. The log holds both runs.
        let restarted = try #require(stack.serve)
        #expect(stack.waitUntil(timeout: 30) { restarted.replayedTotal("applied") >= Self.recordCount })
        #expect(restarted.replayedTotal("applied") == Self.recordCount, "applied \(restarted.replayedTotal("applied"))")
        #expect(restarted.replayedTotal("duplicate") == 0)
    }

    @Test(
        "requests accepted before SIGTERM are answered during the drain by running services: /healthz's PING, an unknown kid's fetch"
    )
    func drainKeepsWhatItNeeds() throws {
        // An unknown kid may fetch a second after the start's fetch (not the default minute).
        let stack = try ServeStack(extraEnvironment: ["SIWA_JWKS_UNKNOWN_KID_REFRESH_SECONDS": "1"])
        defer { stack.shutdown() }
        guard let serve = stack.serve else { throw ServeProcess.StartFailure(description: "no serve") }
        // serve listens after its start's fetch: the unknown kid's interval counts from before here.
        let listening = ContinuousClock.now
        // Apple rotates: the JWKS host publishes a key serve has not seen.
        let rotated = try TestSigningKey.generate(keyID: "test-apple-key-rotated")
        try stack.jwks.serve(Array(try TestSigningKey.jwksDocument([stack.key, rotated]).utf8))
        let fetchesBefore = stack.jwks.keysRequestCount
        // Two requests accepted before SIGTERM, each held part way through its body, so a
        // worker takes them only once the stop is under way.
        let client = FastCGIClient(.unixSocket(stack.socketPath))
        let healthBody = Array(#"{"probe":"during the drain"}"#.utf8)
        let health = try client.connect().sendHoldingBack(
            params: FastCGIClient.params(method: "GET", uri: "/healthz", body: healthBody), body: healthBody,
            sentBodyBytes: 5)
        let notification = try stack.body(type: "consent-revoked", sub: "000041.drain.0001", signedWith: rotated)
        let post = try client.connect().sendHoldingBack(
            params: FastCGIClient.params(
                method: "POST", uri: "/apple/notifications", body: notification, contentType: "application/json"),
            body: notification, sentBodyBytes: notification.count / 2)
        // Both are in: a /healthz sent after them is answered (the acceptor has read what it was sent).
        #expect(try stack.request("GET", "/healthz").status == 200)

        serve.terminate()
        #expect(stack.waitUntil(timeout: 10) { !serve.logLines(event: "stopping").isEmpty })
        // /healthz during the drain: the breaker still answers its PING.
        let healthAnswer = try health.finish()
        #expect(healthAnswer.status == 200, "\(healthAnswer.bodyText)")
        #expect(!healthAnswer.bodyText.contains("ping_timeout"), "\(healthAnswer.bodyText)")
        // The unknown kid's fetch, once its interval from the start's fetch has passed.
        _ = stack.waitUntil(timeout: 5) { ContinuousClock.now - listening > .milliseconds(1200) }
        let postAnswer = try post.finish()
        #expect(postAnswer.status == 200 && postAnswer.bodyText == #"{"status":"applied"}"#, "\(postAnswer.bodyText)")
        #expect(stack.jwks.keysRequestCount == fetchesBefore + 1, "one fetch, for the unknown kid")
        #expect(try stack.userHash(sub: "000041.drain.0001")["consent_revoked_at"] != nil)

        #expect(serve.waitForExit(timeout: 15) == 0)
        #expect(serve.logLines(event: "stopped").first?.contains(#""drained":true"#) == true)
    }

    /// A FastCGI POST that announces 100,000 body bytes and sends 70,000: its parameters are
    /// whole, so at the stop it is watched on for the rest of its body (until the request's
    /// 30 s deadline), and the drain cannot finish.
    static func partialRequest(socketPath: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: Array(socketPath.utf8.prefix(raw.count - 1)) + [0])
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        try #require(connected == 0)
        func record(_ type: UInt8, _ content: [UInt8]) -> [UInt8] {
            [1, type, 0, 1, UInt8(content.count >> 8), UInt8(content.count & 0xff), 0, 0] + content
        }
        var params: [UInt8] = []
        for (name, value) in [
            ("REQUEST_METHOD", "POST"), ("SCRIPT_NAME", "/apple/notifications"),
            ("REQUEST_URI", "/apple/notifications"), ("CONTENT_TYPE", "application/json"), ("CONTENT_LENGTH", "100000"),
        ] {
            params += [UInt8(name.utf8.count), UInt8(value.utf8.count)] + Array(name.utf8) + Array(value.utf8)
        }
        let bytes =
            record(1, [0, 1, 0, 0, 0, 0, 0, 0]) + record(4, params) + record(4, [])
            + record(5, Array(repeating: UInt8(ascii: "{"), count: 35_000))
            + record(5, Array(repeating: UInt8(ascii: "{"), count: 35_000))
        try #require(write(fd, bytes, bytes.count) == bytes.count)
        return fd
    }
}
