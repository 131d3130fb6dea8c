import Foundation
import Glibc
import SIWAJSON
import SIWARedis
import SIWAVerification
import Testing

@testable import SIWAStore

/// What the deliverer's tests run: a real redis-server, a test CA, HTTPS receivers on loopback
/// (Python; each request verified with the reference `standardwebhooks` library, v1a with
/// `cryptography`), signing keys made by `deliver keygen`, and the real `siwa-endpoint deliver`
/// processes. Events are written by serve's own apply script (`NotificationStore.apply`).
final class WebhookStack: @unchecked Sendable {
    let directory: URL
    let redis: RedisServerProcess
    let authority: TestCertificateAuthority
    let hmacKeyPath: String
    let hmacSecret: String
    let ed25519KeyPath: String
    let ed25519Public: String
    let store: NotificationStore
    let test: RedisConnection
    private(set) var receivers: [WebhookReceiver] = []
    private(set) var deliverers: [DelivererProcess] = []
    var streamMaximumLength = 1000

    /// The test virtualenv's python (standardwebhooks, cryptography), as the contract tests find it.
    static var python: String { ExampleFiles.python }

    init(streamMaximumLength: Int = 1000) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("webhooks-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        redis = try RedisServerProcess()
        authority = try TestCertificateAuthority(in: directory)
        hmacKeyPath = directory.appendingPathComponent("hmac.key").path
        ed25519KeyPath = directory.appendingPathComponent("ed25519.key").path
        let hmac = try CommandRun.endpoint(["deliver", "keygen", "--scheme", "hmac", "--out", hmacKeyPath])
        let ed25519 = try CommandRun.endpoint(["deliver", "keygen", "--scheme", "ed25519", "--out", ed25519KeyPath])
        guard hmac.status == 0, ed25519.status == 0 else {
            throw TestCertificateAuthority.Failure(description: "keygen failed: \(hmac.errors) \(ed25519.errors)")
        }
        hmacSecret = try String(contentsOfFile: hmacKeyPath, encoding: .utf8).trimmingCharacters(in: .newlines)
        ed25519Public = ed25519.output.trimmingCharacters(in: .newlines)
        self.streamMaximumLength = streamMaximumLength
        store = NotificationStore(connection: redis.unixSocketConnection(), streamMaximumLength: streamMaximumLength)
        test = redis.unixSocketConnection()
    }

    deinit { shutdown() }

    func shutdown() {
        for deliverer in deliverers { deliverer.kill(SIGKILL) }
        for receiver in receivers { receiver.stop() }
        redis.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }

    /// A receiver on a free port, verifying with both keys.
    func receiver(_ name: String) throws -> WebhookReceiver {
        let receiver = try WebhookReceiver(
            name: name, directory: directory, certificate: authority.serverCertificatePath,
            key: authority.serverKeyPath, hmac: [hmacSecret], ed25519: [ed25519Public])
        receivers.append(receiver)
        return receiver
    }

    /// One destination entry of the destinations file.
    func destination(
        _ name: String, _ receiver: WebhookReceiver?, url: String? = nil, keys: [String]? = nil,
        extra: [(String, JSONValue)] = []
    ) -> JSONValue {
        var members: [String: JSONValue] = [
            "name": .string(name), "url": .string(url ?? "https://localhost:\(receiver?.port ?? 1)/hook"),
            "signing_key_files": .array((keys ?? [ed25519KeyPath, hmacKeyPath]).map { .string($0) }),
            "ca_file": .string(authority.caCertificatePath), "allow_private_address": .bool(true),
        ]
        for (key, value) in extra { members[key] = value }
        return .object(members)
    }

    /// The deliverer's environment: the destinations file written, fast schedule, small bounds.
    func environment(_ destinations: [JSONValue], _ settings: [String: String] = [:]) throws -> [String: String] {
        let path = directory.appendingPathComponent("webhooks-\(UUID().uuidString).json").path
        try JSONWriter.object([("destinations", .array(destinations))]).write(
            toFile: path, atomically: true, encoding: .utf8)
        return [
            "SIWA_REDIS_URL": redis.url(), "SIWA_WEBHOOK_DESTINATIONS": path, "SIWA_WEBHOOK_RETRY_SCALE": "0.001",
            "SIWA_WEBHOOK_TIMEOUT_MS": "2000", "SIWA_WEBHOOK_CONNECT_TIMEOUT_MS": "1000",
            "SIWA_STREAM_MAXLEN": String(streamMaximumLength),
            "SIWA_WEBHOOK_METRICS_LISTEN": "127.0.0.1:\(try LoopbackPort.free())", "PATH": "/usr/bin:/bin",
        ].merging(settings) { $1 }
    }

    /// Starts `siwa-endpoint deliver`, waiting for its `deliver_started` line and then, unless
    /// `reading` is false (a Redis user that cannot make groups), for each destination's
    /// `webhook_destination_reading` line: its group is made at the stream's end (`$`) by its
    /// destination's thread, after the start line, so an event a test wrote in between would
    /// never be that group's (a cluster test missed two so on a loaded machine). When the
    /// deliverer writes to this stack's Redis (no Sentinel, no Cluster), each group is then
    /// checked to exist there.
    @discardableResult
    func startDeliverer(_ environment: [String: String], reading: Bool = true) throws -> DelivererProcess {
        let deliverer = try DelivererProcess(environment: environment, directory: directory)
        deliverers.append(deliverer)
        var started: String?
        guard
            waitUntil(
                timeout: 10,
                {
                    started = deliverer.lines().first { $0.contains(#""event":"deliver_started""#) }
                    return started != nil
                })
        else { throw TestCertificateAuthority.Failure(description: "deliver did not start: \(deliverer.errorText())") }
        guard reading, let started,
            case .object(let line)? = try? StrictJSONParser.parse(Array(started.utf8)),
            case .array(let names)? = line["destinations"]
        else { return deliverer }
        let destinations = names.compactMap { name -> String? in
            if case .string(let text) = name { text } else { nil }
        }
        guard
            waitUntil(
                timeout: 30,
                {
                    let reading = deliverer.lines().filter { $0.contains(#""event":"webhook_destination_reading""#) }
                    return destinations.allSatisfy { name in
                        reading.contains { $0.contains(#""destination":"\#(name)""#) }
                    }
                })
        else {
            throw TestCertificateAuthority.Failure(
                description: "deliver is not reading for every one of \(destinations): \(deliverer.errorText())")
        }
        guard environment["SIWA_REDIS_SENTINELS"] == nil, environment["SIWA_REDIS_CLUSTER_NODES"] == nil else {
            return deliverer
        }
        let made = ((try? Self.groups("siwa:events", on: test)) ?? []).compactMap { $0["name"]?.string }
        let groups = destinations.map { "deliver:" + $0 }
        guard groups.allSatisfy(made.contains) else {
            throw TestCertificateAuthority.Failure(
                description: "deliver said it reads for \(destinations), and the groups are \(made)")
        }
        return deliverer
    }

    /// One notification through serve's apply script; returns its jti.
    @discardableResult
    func add(
        _ type: String, jti: String, clientID: String = "com.example.app", subject: String = "001234.abc",
        email: String? = nil, eventTime: Int64? = nil
    ) throws -> String {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let notification = VerifiedNotification(
            clientID: clientID, subject: subject, type: NotificationEventType(rawType: type), rawType: type,
            eventTimeMilliseconds: eventTime ?? now, tokenID: jti, issuedAt: now / 1000, expiresAt: nil, email: email,
            isPrivateEmail: email.map { $0.hasSuffix("privaterelay.appleid.com") })
        _ = try store.apply(notification, receivedAt: now)
        return jti
    }

    /// The group's pending count on `stream` (delivered, not acknowledged) plus its lag.
    func pending(_ group: String, stream: String = "siwa:events") throws -> Int {
        let delivered = Int(try test.command("XPENDING", stream, group).array?.first?.integer ?? -1)
        let lag = try Self.groups(stream, on: test).first { $0["name"]?.string == group }?["lag"]?.integer ?? -1
        return delivered + Int(lag)
    }

    /// Each consumer group of `stream` (XINFO GROUPS): its fields by name.
    static func groups(_ stream: String, on connection: RedisConnection) throws -> [[String: RedisReply]] {
        try (connection.command("XINFO", "GROUPS", stream).array ?? []).map { info in
            let fields = info.array ?? []
            var map: [String: RedisReply] = [:]
            for index in stride(from: 0, to: fields.count - 1, by: 2) {
                map[fields[index].string ?? ""] = fields[index + 1]
            }
            return map
        }
    }
}

/// One HTTPS receiver (webhook_receiver.py) and what it recorded.
final class WebhookReceiver: @unchecked Sendable {
    let name: String
    let port: Int
    let logPath: String
    let planPath: String
    private let process: Process

    init(
        name: String, directory: URL, certificate: String, key: String, hmac: [String], ed25519: [String]
    ) throws {
        self.name = name
        port = try LoopbackPort.free()
        logPath = directory.appendingPathComponent("\(name).log").path
        planPath = directory.appendingPathComponent("\(name)-plan.json").path
        let keysPath = directory.appendingPathComponent("\(name)-keys.json").path
        let readyPath = directory.appendingPathComponent("\(name).ready").path
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        _ = FileManager.default.createFile(atPath: readyPath, contents: nil)
        try JSONWriter.object([
            ("hmac", .array(hmac.map { .string($0) })), ("ed25519", .array(ed25519.map { .string($0) })),
        ]).write(toFile: keysPath, atomically: true, encoding: .utf8)
        process = Process()
        process.executableURL = URL(fileURLWithPath: WebhookStack.python)
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("webhook_receiver.py").path
        process.arguments = [script, String(port), certificate, key, logPath, planPath, keysPath]
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: readyPath))
        process.standardError = FileHandle.nullDevice
        try plan(default: ["status": .integer(200)])
        try process.run()
        guard
            waitUntil(
                timeout: 10,
                {
                    (try? String(contentsOfFile: readyPath, encoding: .utf8))?.contains("ready") == true
                })
        else { throw TestCertificateAuthority.Failure(description: "the receiver \(name) did not start") }
    }

    /// How to answer: `default` for every request, `byID` the n-th request of an ID.
    func plan(default answer: [String: JSONValue], byID: [String: [[String: JSONValue]]] = [:]) throws {
        let plan: [(String, JSONValue)] = [
            ("default", .object(answer)),
            ("by_id", .object(byID.mapValues { .array($0.map { .object($0) }) })),
        ]
        try JSONWriter.object(plan).write(toFile: planPath, atomically: true, encoding: .utf8)
    }

    /// Every request so far, in arrival order.
    func records() -> [[String: JSONValue]] {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap {
            guard case .object(let members) = try? StrictJSONParser.parse(Array($0.utf8)) else { return nil }
            return members
        }
    }

    /// The webhook-ids received, in order.
    func ids() -> [String] {
        records().compactMap { if case .string(let id)? = $0["id"] { return id } else { return nil } }
    }

    func count(_ id: String) -> Int { ids().filter { $0 == id }.count }

    /// The number of the TCP connection each request of `ids` came on, in arrival order.
    func connections(of ids: Set<String>) -> [Int] {
        records().compactMap { record in
            guard case .string(let id)? = record["id"], ids.contains(id),
                case .integer(let number)? = record["connection"]
            else { return nil }
            return Int(number)
        }
    }

    /// The connections' openings and closings ("open N", "closed N"), in order.
    func connectionEvents() -> [String] {
        ((try? String(contentsOfFile: logPath + ".connections", encoding: .utf8)) ?? "").split(separator: "\n")
            .map(String.init)
    }

    func stop() {
        // SIGKILL: the test process's signal mask and ignored signals are inherited, so a
        // SIGTERM may never reach python.
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// A running `siwa-endpoint deliver`.
final class DelivererProcess: @unchecked Sendable {
    /// The child, started by the tests' one launcher.
    let endpoint: EndpointProcess
    var process: Process { endpoint.process }
    let errorPath: String
    let metricsAddress: String

    init(environment: [String: String], directory: URL) throws {
        errorPath = directory.appendingPathComponent("deliver-\(UUID().uuidString).err").path
        metricsAddress = environment["SIWA_WEBHOOK_METRICS_LISTEN"] ?? ""
        endpoint = try EndpointProcess(
            ["deliver"], environment: environment, standardError: URL(fileURLWithPath: errorPath))
    }

    func errorText() -> String { (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "" }
    func lines() -> [String] { errorText().split(separator: "\n").map(String.init) }

    func kill(_ signal: Int32) {
        if process.isRunning {
            endpoint.send(signal)
            process.waitUntilExit()
        }
    }

    /// `GET /metrics`: the value of each sample line, by its name and labels.
    func metrics() throws -> [String: Double] {
        let run = try CommandRun.run(
            URL(fileURLWithPath: "/usr/bin/curl"), ["-s", "--max-time", "5", "http://\(metricsAddress)/metrics"])
        var values: [String: Double] = [:]
        for line in run.output.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                continue
            }
            values[String(line[..<space])] = value
        }
        return values
    }
}
