import CCurl
import Foundation
import Glibc
import Testing

@testable import SIWAHTTPS

/// The deliverer's kept connection (`HTTPSPostSession`) in process, against a real TLS receiver
/// on loopback (kept_connection_receiver.py) that answers each POST with the number of the
/// connection it came on and its number on that connection: what the receiver saw.
@Suite struct KeptConnectionTests {
    static let userAgent = "siwa-endpoint/test"

    /// A receiver, its test CA, and a session trusting that CA (loopback allowed).
    final class Fixture {
        let directory: URL
        let authority: TestCertificateAuthority
        let receiver: KeptConnectionReceiver
        let session: HTTPSPostSession

        init(idleLimit: Duration = .seconds(30), keepConnection: Bool = true) throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("kept-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            authority = try TestCertificateAuthority(in: directory)
            // Signed by the same CA, so only the name it holds is wrong.
            let other = try authority.makeLeaf("other-host", san: "DNS:other.example", usage: "serverAuth")
            receiver = try KeptConnectionReceiver(
                directory: directory, certificate: authority.serverCertificatePath, key: authority.serverKeyPath,
                otherCertificate: other.certificatePath, otherKey: other.keyPath)
            session = HTTPSPostSession(
                fetcher: HTTPSFetcher(caFilePath: authority.caCertificatePath, timeoutSeconds: 5, maximumBytes: 4096),
                allowPrivateAddress: true, keepConnection: keepConnection, idleLimit: idleLimit)
        }

        deinit {
            session.close()
            receiver.stop()
            try? FileManager.default.removeItem(at: directory)
        }

        /// One POST to `path`; the receiver's "<connection> <request>" answer.
        func post(_ path: String = "/hook") throws(HTTPSFetchError) -> String {
            let response = try session.postJSON(
                "https://localhost:\(receiver.port)\(path)", body: #"{"n":1}"#, headers: ["webhook-id: msg_1"],
                userAgent: KeptConnectionTests.userAgent, connectTimeoutSeconds: 2)
            return String(decoding: response.body, as: UTF8.self)
        }

        /// The error a POST to `path` throws, nil when it succeeds.
        func failure(_ path: String = "/hook") -> HTTPSFetchError? {
            do throws(HTTPSFetchError) {
                _ = try post(path)
                return nil
            } catch {
                return error
            }
        }
    }

    @Test("five POSTs: the receiver sees one TCP connection carrying all five")
    func reused() throws {
        let fixture = try Fixture()
        let answers = try (1...5).map { _ in try fixture.post() }
        #expect(answers == ["1 1", "1 2", "1 3", "1 4", "1 5"])
        #expect(fixture.receiver.connectionEvents() == ["open 1"])
        #expect(fixture.session.holdsConnection)
    }

    @Test("keep_connection false: five POSTs, five connections, each closed after its answer")
    func freshConnections() throws {
        let fixture = try Fixture(keepConnection: false)
        let answers = try (1...5).map { _ in try fixture.post() }
        #expect(answers == ["1 1", "2 1", "3 1", "4 1", "5 1"])
        #expect(waitUntil(timeout: 10) { fixture.receiver.events().filter { $0.hasPrefix("closed") }.count == 5 })
        #expect(!fixture.session.holdsConnection)
    }

    @Test("the receiver closes the kept connection after answering: the next POST goes on a new one")
    func reestablishedAfterReceiverClose() throws {
        let fixture = try Fixture()
        #expect(try fixture.post() == "1 1")
        #expect(try fixture.post("/hook-then-close") == "1 2")
        #expect(waitUntil(timeout: 10) { fixture.receiver.events().contains("closed 1") })
        #expect(try fixture.post() == "2 1")
        #expect(try fixture.post() == "2 2")
        #expect(fixture.receiver.connectionEvents() == ["open 1", "closed 1", "open 2"])
    }

    @Test("a POST the receiver drops unanswered fails; the next one succeeds on a new connection")
    func reestablishedAfterError() throws {
        let fixture = try Fixture()
        #expect(try fixture.post() == "1 1")
        // Written on the kept connection and answered by nothing, it is written once more on a
        // new one (libcurl's rule for a kept connection that dies), which drops it too.
        let dropped = fixture.failure("/drop")
        #expect(dropped?.code == .transferFailed, "\(String(describing: dropped))")
        #expect(dropped?.curlCode == CURLE_GOT_NOTHING.rawValue)
        #expect(!fixture.session.holdsConnection)
        #expect(try fixture.post() == "3 1")
        #expect(try fixture.post() == "3 2")
    }

    @Test("an answer's Retry-After is its own: the next answer on the kept connection without one has none")
    func retryAfterNotCarriedOver() throws {
        let fixture = try Fixture()
        func post(_ path: String) throws(HTTPSFetchError) -> HTTPSResponse {
            try fixture.session.postJSON(
                "https://localhost:\(fixture.receiver.port)\(path)", body: "{}", headers: [],
                userAgent: Self.userAgent, connectTimeoutSeconds: 2)
        }
        let slowDown = try post("/slow-down")
        #expect(slowDown.status == 503 && slowDown.retryAfter == "7")
        #expect(String(decoding: slowDown.body, as: UTF8.self) == "1 1")
        let unavailable = try post("/unavailable")
        #expect(unavailable.status == 503 && unavailable.retryAfter == nil)
        #expect(String(decoding: unavailable.body, as: UTF8.self) == "1 2")
    }

    @Test("an answer no request asked for, waiting on the kept connection, is never read as the next POST's")
    func strayAnswerNotReadAsNext() throws {
        let fixture = try Fixture()
        #expect(try fixture.post() == "1 1")
        #expect(try fixture.post("/answer-twice") == "1 2")
        // The receiver's second 200 now waits unread on the kept connection.
        #expect(waitUntil(timeout: 10) { fixture.receiver.events().contains("stray 1") })
        usleep(100_000)
        // The receiver answers this POST 503: the stray 200 before it must not stand for it.
        let response = try fixture.session.postJSON(
            "https://localhost:\(fixture.receiver.port)/unavailable", body: "{}", headers: [],
            userAgent: Self.userAgent, connectTimeoutSeconds: 2)
        #expect(response.status == 503)
        #expect(String(decoding: response.body, as: UTF8.self) == "2 1")
        #expect(try fixture.post() == "2 2")
        #expect(fixture.receiver.events().filter { $0.hasPrefix("open") } == ["open 1", "open 2"])
    }

    @Test("a kept handle libcurl refuses an option of fails the call: no handle of its own in its place, nothing sent")
    func unusableKeptHandleFailsTheCall() throws {
        let fixture = try Fixture()
        // A lifetime libcurl refuses (negative), as an older libcurl refuses an option it lacks.
        let kept = KeptHandle(idleLimit: .seconds(30), lifetime: .seconds(-1))
        defer { kept.close() }
        do throws(HTTPSFetchError) {
            _ = try fixture.session.fetcher.postJSON(
                "https://localhost:\(fixture.receiver.port)/hook", body: "{}", headers: [], userAgent: Self.userAgent,
                connectTimeoutSeconds: 2, addressGuard: AddressGuard(allowPrivate: true), on: kept)
            Issue.record("the POST went out on a handle that nothing cleans up")
        } catch {
            #expect(error.code == .clientUnavailable, "\(error)")
        }
        #expect(fixture.receiver.events().isEmpty)
    }

    @Test("idle bound: not closed before it, closed (the receiver sees it) once unused that long")
    func idleBounded() throws {
        let fixture = try Fixture(idleLimit: .seconds(2))
        #expect(try fixture.post() == "1 1")
        #expect(!fixture.session.closeIfIdle(now: .now))
        #expect(try fixture.post() == "1 2")
        // Two seconds after the last use, as the deliverer's turn would find it.
        #expect(fixture.session.closeIfIdle(now: .now + .seconds(2)))
        #expect(!fixture.session.holdsConnection)
        #expect(waitUntil(timeout: 10) { fixture.receiver.events().contains("closed 1") })
        #expect(try fixture.post() == "2 1")
    }

    @Test("a new connection is verified: after the receiver's certificate changes, the next connection is refused")
    func certificateVerifiedPerConnection() throws {
        let fixture = try Fixture()
        #expect(try fixture.post() == "1 1")
        try fixture.receiver.switchCertificate(caFile: fixture.authority.caCertificatePath)
        // The kept connection was verified when opened and still carries POSTs.
        #expect(try fixture.post() == "1 2")
        #expect(try fixture.post("/hook-then-close") == "1 3")
        #expect(waitUntil(timeout: 10) { fixture.receiver.events().contains("closed 1") })
        let refused = fixture.failure()
        #expect(refused?.code == .tlsVerificationFailed, "\(String(describing: refused))")
        // Every POST the receiver saw came on connection 1, verified before the switch: none
        // reached it since. (The refused handshake may still count as a connection opened on
        // the receiver's side, so connections are not what is counted.)
        #expect(fixture.receiver.events().filter { $0.hasPrefix("post") } == ["post 1", "post 1", "post 1"])
    }

    @Test("a kept handle that reconnects checks the address again: refused before any packet")
    func privateAddressCheckedOnReconnect() throws {
        let fixture = try Fixture()
        #expect(try fixture.post("/hook-then-close") == "1 1")
        #expect(waitUntil(timeout: 10) { fixture.receiver.events().contains("closed 1") })
        // As if the destination's name now resolved to a private address.
        fixture.session.allowPrivateAddress = false
        let refused = fixture.failure()
        #expect(refused?.code == .addressRefused, "\(String(describing: refused))")
        #expect(fixture.receiver.connectionEvents() == ["open 1", "closed 1"])
    }
}

/// kept_connection_receiver.py on a free loopback port.
final class KeptConnectionReceiver {
    let port: Int
    let eventsPath: String
    private let process: Process

    init(directory: URL, certificate: String, key: String, otherCertificate: String, otherKey: String) throws {
        port = try LoopbackPort.free()
        eventsPath = directory.appendingPathComponent("connections.log").path
        let readyPath = directory.appendingPathComponent("receiver.ready").path
        _ = FileManager.default.createFile(atPath: eventsPath, contents: nil)
        _ = FileManager.default.createFile(atPath: readyPath, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: WebhookStack.python)
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("kept_connection_receiver.py").path
        process.arguments = [script, String(port), certificate, key, otherCertificate, otherKey, eventsPath]
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: readyPath))
        process.standardError = FileHandle.nullDevice
        try process.run()
        guard
            waitUntil(
                timeout: 10, { (try? String(contentsOfFile: readyPath, encoding: .utf8))?.contains("ready") == true })
        else {
            stop()
            throw TestCertificateAuthority.Failure(description: "the kept-connection receiver did not start")
        }
    }

    /// The connections' openings and closings, in order.
    func events() -> [String] {
        ((try? String(contentsOfFile: eventsPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// The connections' opening and closing, without the POSTs' lines.
    func connectionEvents() -> [String] {
        events().filter { !$0.hasPrefix("post") }
    }

    /// From the next handshake on, the receiver presents a certificate for another name.
    func switchCertificate(caFile: String) throws {
        let body = try HTTPSFetcher(caFilePath: caFile, timeoutSeconds: 5).fetch(
            "https://localhost:\(port)/switch-certificate")
        guard body == Array("switched".utf8) else {
            throw TestCertificateAuthority.Failure(description: "the receiver did not switch its certificate")
        }
    }

    func stop() {
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}
