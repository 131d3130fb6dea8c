import Foundation
import SIWARedis
import SIWAStore
import Synchronization
import Testing

/// The readers of docs/contract.md (Python with redis-py, Node.js with node-redis, Ruby with
/// redis-rb), each run against state the real responder wrote, on one Redis node and on a real
/// Redis Cluster (3 primaries, 3 replicas, prefix `{siwa}`): the same cases for every reader.
@Suite("The readers of the Redis contract (Python, Node.js, Ruby), on one node and on a cluster", .serialized)
struct ExampleReaderTests {
    enum Reader: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case python, node, ruby

        var testDescription: String { rawValue }

        /// The program and its first arguments for one of the readers' commands (`state`,
        /// `deletions`, `subscribe`): the Python examples are one file per command.
        func commandLine(_ command: String) -> (executable: String, arguments: [String]) {
            switch self {
            case .python:
                if command == "resolve" || command == "relay" {
                    return (ExampleFiles.python, [ExampleFiles.path("examples/python/siwa_transfer.py"), command])
                }
                let file =
                    ["state": "siwa_state.py", "deletions": "siwa_deletions.py"][command] ?? "siwa_notifications.py"
                return (ExampleFiles.python, [ExampleFiles.path("examples/python/\(file)")])
            case .node: return ("/usr/bin/env", ["node", ExampleFiles.path("examples/node/siwa_reader.js"), command])
            case .ruby: return ("/usr/bin/env", ["ruby", ExampleFiles.path("examples/ruby/siwa_reader.rb"), command])
            }
        }

        /// Debian's node-redis lives in /usr/share/nodejs, which Debian's node searches and
        /// another node (a machine's preinstalled one) finds through NODE_PATH.
        var environment: [String: String] {
            let inherited = ProcessInfo.processInfo.environment
            var environment = ["PATH": inherited["PATH"] ?? "/usr/bin:/bin"]
            if self == .node {
                environment["NODE_PATH"] = ([inherited["NODE_PATH"], "/usr/share/nodejs"].compactMap { $0 })
                    .joined(separator: ":")
            }
            return environment
        }

        /// The reader as a process not yet started, for a test that watches it while it runs.
        func process(_ command: String, _ arguments: [String]) -> Process {
            let (executable, first) = commandLine(command)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = first + arguments
            process.environment = environment
            return process
        }

        /// Runs the reader to its end and returns its standard output.
        func run(_ command: String, _ arguments: [String]) throws -> String {
            let (executable, first) = commandLine(command)
            let run = try CommandRun.run(URL(fileURLWithPath: executable), first + arguments, environment: environment)
            #expect(run.status == 0, "the \(rawValue) reader failed (scripts/install-deps installs it): \(run.errors)")
            return run.output
        }
    }

    enum Topology: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case oneNode = "one node"
        case cluster

        var testDescription: String { rawValue }
    }

    /// The real `serve` writing into one Redis node, or into a real cluster with the prefix
    /// `{siwa}`; the arguments a reader is given to read the same Redis. With `tls`, the node is
    /// TLS-only (`rediss://localhost`), or the cluster is (`--tls-cluster yes`, certificates
    /// that also name 127.0.0.1, the address the cluster announces), under a CA of the test's own.
    final class ReaderStack {
        let stack: ServeStack
        let cluster: RedisClusterNodes?
        /// The TLS-only node, when one node over TLS.
        let tlsNode: RedisServerProcess?
        /// The CA that signed the servers' certificates, when over TLS.
        let caFile: String?
        private let certificates: URL?

        init(_ topology: Topology, tls: Bool = false) throws {
            var cluster: RedisClusterNodes?
            var tlsNode: RedisServerProcess?
            var certificates: URL?
            var environment: [String: String] = [:]
            do {
                if topology == .cluster {
                    let nodes = try RedisClusterNodes(
                        transport: tls ? .tls : .plain, serverNames: "DNS:localhost,IP:127.0.0.1")
                    cluster = nodes
                    environment = ClusterServeTests.environment(nodes)
                } else if tls {
                    let directory = FileManager.default.temporaryDirectory
                        .appendingPathComponent("siwa-reader-ca-\(UUID().uuidString)", isDirectory: true)
                    certificates = directory
                    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                    let authority = try TestCertificateAuthority(in: directory)
                    let node = try RedisServerProcess(
                        tls: .init(
                            certificatePath: authority.serverCertificatePath, keyPath: authority.serverKeyPath,
                            caPath: authority.caCertificatePath))
                    tlsNode = node
                    environment = ["SIWA_REDIS_URL": node.url(), "SIWA_REDIS_TLS_CA_FILE": authority.caCertificatePath]
                }
                stack = try ServeStack(extraEnvironment: environment)
            } catch {
                cluster?.shutdown()
                tlsNode?.shutdown()
                if let certificates { try? FileManager.default.removeItem(at: certificates) }
                throw error
            }
            self.cluster = cluster
            self.tlsNode = tlsNode
            self.certificates = certificates
            caFile = environment["SIWA_REDIS_TLS_CA_FILE"]
        }

        var prefix: String { cluster == nil ? "siwa" : RedisClusterNodes.keyPrefix }

        /// `--redis-url` of the one node, or the cluster's seed nodes and its prefix. The slot's
        /// owner is named last: a reader that used its first seed as a single node, not as a
        /// cluster, would be answered `MOVED`. Over TLS, `rediss://` and, if `withCAFile`,
        /// the CA file.
        func arguments(withCAFile: Bool) -> [String] {
            let tlsArguments = caFile.map { withCAFile ? ["--redis-tls-ca-file", $0] : [] } ?? []
            guard let cluster else { return ["--redis-url", tlsNode?.url() ?? stack.redis.url()] + tlsArguments }
            let owner = cluster.slotOwnerPort()
            let seeds = cluster.nodes.map(\.port).filter { $0 != owner } + [owner].compactMap { $0 }
            return [
                "--cluster-nodes", seeds.map { "127.0.0.1:\($0)" }.joined(separator: ","), "--prefix",
                RedisClusterNodes.keyPrefix,
            ] + (cluster.tls == nil ? [] : ["--redis-url", "rediss://localhost"]) + tlsArguments
        }

        var readerArguments: [String] { arguments(withCAFile: true) }

        /// A connection to the node that holds the contract's keys.
        func connection() throws -> RedisConnection {
            try cluster?.ownerConnection() ?? tlsNode?.unixSocketConnection() ?? stack.redisConnection()
        }

        func shutdown() {
            stack.shutdown()
            cluster?.shutdown()
            tlsNode?.shutdown()
            if let certificates { try? FileManager.default.removeItem(at: certificates) }
        }
    }

    func state(_ reader: Reader, _ readers: ReaderStack, sub: String, sessionStartedAt: Int64) throws -> [String:
        String]
    {
        let output = try reader.run(
            "state",
            readers.readerArguments + [
                "--client-id", ServeStack.clientID, "--sub", sub, "--session-started-at", String(sessionStartedAt),
            ])
        return try ExampleFiles.flatJSON(output)
    }

    @Test(
        "sessions that began at or before consent-revoked are invalid; later ones are valid",
        arguments: Reader.allCases, Topology.allCases)
    func consentRevoked(_ reader: Reader, _ topology: Topology) throws {
        let readers = try ReaderStack(topology)
        defer { readers.shutdown() }
        let stack = readers.stack
        let revokedAt: Int64 = 1_796_000_000_000
        let sub = "000011.\(reader).0001"
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: sub, eventTimeMilliseconds: revokedAt))
                .status == 200)
        #expect(
            try state(reader, readers, sub: sub, sessionStartedAt: revokedAt - 1) == [
                "session_valid": "false", "account_deleted": "false", "email_forwarding": "null",
                "sessions_revoked_at": String(revokedAt), "last_event_type": "consent-revoked",
            ])
        #expect(try state(reader, readers, sub: sub, sessionStartedAt: revokedAt)["session_valid"] == "false")
        #expect(try state(reader, readers, sub: sub, sessionStartedAt: revokedAt + 1)["session_valid"] == "true")
        // The reader read what serve wrote where serve wrote it: under the topology's prefix.
        let hash = try readers.connection().command(
            "HGET", "\(readers.prefix):user:{\(ServeStack.clientID):\(sub)}", "sessions_revoked_at")
        #expect(hash.string == String(revokedAt))
    }

    @Test(
        "an account deleted, an email forwarding off, and a user never notified",
        arguments: Reader.allCases, Topology.allCases)
    func otherStates(_ reader: Reader, _ topology: Topology) throws {
        let readers = try ReaderStack(topology)
        defer { readers.shutdown() }
        let stack = readers.stack
        let time: Int64 = 1_796_000_100_000
        #expect(
            try stack.post(try stack.body(type: "account-deleted", sub: "000011.d.0002", eventTimeMilliseconds: time))
                .status == 200)
        #expect(
            try stack.post(
                try stack.body(
                    type: "email-disabled", sub: "000011.d.0003", eventTimeMilliseconds: time,
                    email: "r@privaterelay.appleid.com", isPrivateEmail: true)
            ).status == 200)
        let deleted = try state(reader, readers, sub: "000011.d.0002", sessionStartedAt: time - 10)
        #expect(deleted["account_deleted"] == "true")
        #expect(deleted["session_valid"] == "false")
        #expect(deleted["email_forwarding"] == "disabled")
        let forwardingOff = try state(reader, readers, sub: "000011.d.0003", sessionStartedAt: time - 10)
        #expect(forwardingOff["email_forwarding"] == "disabled")
        #expect(forwardingOff["session_valid"] == "true")
        #expect(forwardingOff["account_deleted"] == "false")
        let unknown = try state(reader, readers, sub: "000011.d.0404", sessionStartedAt: time)
        #expect(
            unknown == [
                "session_valid": "true", "account_deleted": "false", "email_forwarding": "null",
                "sessions_revoked_at": "null", "last_event_type": "null",
            ])
    }

    @Test(
        "the deletion consumer group gets each account-deleted once, and nothing else",
        arguments: Reader.allCases, Topology.allCases)
    func deletionQueue(_ reader: Reader, _ topology: Topology) throws {
        let readers = try ReaderStack(topology)
        defer { readers.shutdown() }
        let stack = readers.stack
        for (type, sub, time) in [
            ("account-deleted", "000015.t.0001", Int64(1_796_000_001_000)),
            ("consent-revoked", "000015.t.0002", 1_796_000_002_000),
            ("account-delete", "000015.t.0003", 1_796_000_003_000),
        ] {
            #expect(try stack.post(try stack.body(type: type, sub: sub, eventTimeMilliseconds: time)).status == 200)
        }
        let first = try reader.run("deletions", readers.readerArguments)
        let handled = try first.split(separator: "\n").map { try ExampleFiles.flatJSON(String($0)) }
        #expect(
            handled == [
                ["client_id": "com.example.app", "sub": "000015.t.0001", "event_time": "1796000001000"],
                ["client_id": "com.example.app", "sub": "000015.t.0003", "event_time": "1796000003000"],
            ])
        // Acknowledged: a second run finds nothing new.
        #expect(try reader.run("deletions", readers.readerArguments).isEmpty)
        // The group reads the deletions stream: nothing pending, nothing left to deliver.
        let deletions = "\(readers.prefix):deletions"
        let pending = try readers.connection().command("XPENDING", deletions, "account-cleanup")
        #expect(pending.array?.first?.integer == 0)
        let reading = try DeletionDutyReading.read(readers.connection(), key: deletions)
        #expect(reading.entries == 2 && reading.groups.map(\.name) == ["account-cleanup"])
        #expect(reading.groups.first?.pending == 0)
    }

    @Test(
        "the subscription hears each applied revocation as it happens (Python: every message), and no other message",
        arguments: Reader.allCases, Topology.allCases)
    func subscription(_ reader: Reader, _ topology: Topology) throws {
        let readers = try ReaderStack(topology)
        defer { readers.shutdown() }
        let stack = readers.stack
        // Node.js and Ruby hear the revocations only; Python's siwa_notifications.py prints
        // every message of the channel, and a line of its own when it subscribes.
        let expectedCount = reader == .python ? 3 : 2
        let subscribedLine = reader == .python ? #"{"subscribed": true}"# : "subscribed"
        let process = reader.process(
            "subscribe",
            readers.readerArguments + ["--count", String(expectedCount)]
                + (reader == .python ? ["--timeout", "120"] : []))
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        let received = Mutex("")
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil }  // the end: stop watching
            received.withLock { $0 += String(decoding: data, as: UTF8.self) }
        }
        try process.run()
        defer {
            if process.isRunning { process.terminate() }
            output.fileHandleForReading.readabilityHandler = nil
        }
        #expect(stack.waitUntil(timeout: 20) { received.withLock { $0 } == subscribedLine + "\n" })
        var posted: [[String: String]] = []
        for (type, sub) in [
            ("email-disabled", "000016.s.0001"), ("consent-revoked", "000016.s.0002"),
            ("account-deleted", "000016.s.0003"),
        ] {
            let email: String? = type == "email-disabled" ? "s@privaterelay.appleid.com" : nil
            #expect(try stack.post(try stack.body(type: type, sub: sub, email: email)).status == 200)
            posted.append(["client_id": "com.example.app", "sub": sub, "type": type])
        }
        // The messages heard, then it exits by itself.
        #expect(
            stack.waitUntil(timeout: 20) {
                received.withLock { $0 }.filter { $0 == "\n" }.count == expectedCount + 1
            })
        #expect(stack.waitUntil(timeout: 20) { !process.isRunning })
        #expect(process.terminationStatus == 0)
        let lines = received.withLock { $0 }.split(separator: "\n").map(String.init)
        #expect(lines.first == subscribedLine)
        let heard = try lines.dropFirst().map(ExampleFiles.flatJSON).map {
            $0.filter { ["client_id", "sub", "type"].contains($0.key) }
        }
        #expect(heard == (reader == .python ? posted : Array(posted.dropFirst())))
        if reader == .python {
            // Python prints each message whole: never an email address.
            #expect(!received.withLock { $0 }.contains("@"))
        }
    }

    @Test(
        "over TLS (a TLS-only node, a --tls-cluster yes cluster, a CA of their own): each reader reads with the certificate verified against --redis-tls-ca-file, and without it is refused",
        arguments: Topology.allCases)
    func overTLS(_ topology: Topology) throws {
        // One stack, one node or one cluster, for the three readers.
        let readers = try ReaderStack(topology, tls: true)
        defer { readers.shutdown() }
        let stack = readers.stack
        let revokedAt: Int64 = 1_796_000_200_000
        let sub = "000017.tls.0001"
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: sub, eventTimeMilliseconds: revokedAt))
                .status == 200)
        let hash = try readers.connection().command(
            "HGET", "\(readers.prefix):user:{\(ServeStack.clientID):\(sub)}", "sessions_revoked_at")
        #expect(hash.string == String(revokedAt))
        for reader in Reader.allCases {
            #expect(
                try state(reader, readers, sub: sub, sessionStartedAt: revokedAt) == [
                    "session_valid": "false", "account_deleted": "false", "email_forwarding": "null",
                    "sessions_revoked_at": String(revokedAt), "last_event_type": "consent-revoked",
                ], "\(reader)")
            // The system's CAs do not hold the test's CA: without the CA file, the certificate
            // is refused, never read through unverified.
            let (executable, first) = reader.commandLine("state")
            let refused = try CommandRun.run(
                URL(fileURLWithPath: executable),
                first + readers.arguments(withCAFile: false) + [
                    "--client-id", ServeStack.clientID, "--sub", sub, "--session-started-at", "0",
                ], environment: reader.environment, timeout: .seconds(60))
            #expect(refused.status != 0, "\(reader)")
            #expect(refused.output.isEmpty, "\(reader)")
            #expect(
                refused.errors.contains("self-signed certificate in certificate chain"), "\(reader): \(refused.errors)")
        }
    }

    /// redis-py's own exception classes, raised once each by the operation `with_retry` runs:
    /// what a failover or a slot migration raises for a while is retried, and the read then
    /// answers; a cross-slot or wrong-type error is raised at once, never retried.
    static let retryProbe = #"""
        import ssl
        import redis.exceptions as e
        from siwa_redis import with_retry

        passing = [
            e.ConnectionError("Connection refused"), e.TimeoutError("Timeout reading"), e.ReadOnlyError("READONLY"),
            e.ClusterDownError("CLUSTERDOWN The cluster is down"), e.MasterDownError("MASTERDOWN Link with MASTER is down"),
            e.SlotNotCoveredError("Command # 1 (HGETALL k) does not have a slot"),
            e.TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"), e.MovedError("3999 127.0.0.1:7001"),
            e.AskError("3999 127.0.0.1:7002"), e.ClusterError("TTL exhausted."),
        ]
        lasting = [e.ClusterCrossSlotError("CROSSSLOT Keys in request don't hash to the same slot"), e.ResponseError("WRONGTYPE")]
        # A refused server certificate, raised as redis-py raises it: ConnectionError while
        # handling ssl's verification error (message included).
        certificate = ssl.SSLCertVerificationError(
            1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain")
        for error in passing + lasting + [certificate]:
            calls = []

            def operation():
                calls.append(error)
                if len(calls) == 1:
                    if error is certificate:
                        try:
                            raise error
                        except OSError:
                            raise e.ConnectionError("Error 1 connecting to 127.0.0.1:6380. certificate refused.")
                    raise error
                return "read"

            try:
                outcome = with_retry(operation, attempts=3, pause=0.01)
            except Exception as raised:
                outcome = "raised " + type(raised).__name__
            print(type(error).__name__, outcome, len(calls))
        """#

    @Test(
        "Python's with_retry retries the errors of a failover and of a slot migration (redis-py's classes), and no other: a refused server certificate is raised at once"
    )
    func pythonRetriesClusterErrors() throws {
        let run = try CommandRun.run(
            URL(fileURLWithPath: ExampleFiles.python), ["-c", Self.retryProbe],
            environment: ["PYTHONPATH": ExampleFiles.path("examples/python")])
        #expect(run.status == 0, "\(run.errors)")
        #expect(
            run.lines.filter { !$0.isEmpty } == [
                "ConnectionError read 2", "TimeoutError read 2", "ReadOnlyError read 2", "ClusterDownError read 2",
                "MasterDownError read 2", "SlotNotCoveredError read 2", "TryAgainError read 2", "MovedError read 2",
                "AskError read 2", "ClusterError read 2", "ClusterCrossSlotError raised ClusterCrossSlotError 1",
                "ResponseError raised ResponseError 1", "SSLCertVerificationError raised ConnectionError 1",
            ])
    }
}
