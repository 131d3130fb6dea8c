import Foundation
import SIWAJSON
import SIWARedis
import SIWAVerification
import Testing

@testable import SIWAStore

/// The shipped Redis users (deploy/redis-siwa-users.conf) on a real redis-server: each
/// process does its work under its own user, and what it must not do is refused (NOPERM)
/// with Redis unchanged. Above all: no user but serve's and the operator's can add to the
/// events or deletions stream, which the deliverer turns into signed webhooks.
@Suite("Redis users", .serialized)
struct RedisUsersTests {
    static let shippedFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../../deploy/redis-siwa-users.conf").standardized.path

    static func password(_ user: String) -> String { user + "-fixture-password" }

    /// Each `user` line of the shipped file as `ACL SETUSER` (the same rules, the same
    /// parser), then a password for it; the names, in file order.
    @discardableResult
    static func loadShippedUsers(_ admin: RedisConnection) throws -> [String] {
        let text = try String(contentsOfFile: shippedFile, encoding: .utf8)
        var names: [String] = []
        for line in text.split(separator: "\n") where line.hasPrefix("user ") {
            let words = line.split(separator: " ").map(String.init)
            _ = try admin.command(["ACL", "SETUSER"] + words.dropFirst())
            _ = try admin.command("ACL", "SETUSER", words[1], ">" + password(words[1]))
            names.append(words[1])
        }
        return names
    }

    static func url(_ user: String, _ redis: RedisServerProcess) -> String {
        "redis://\(user):\(password(user))@127.0.0.1:\(redis.port)/0"
    }

    static func connection(_ user: String, _ redis: RedisServerProcess) -> RedisConnection {
        RedisConnection(
            endpoint: RedisEndpoint(
                address: .tcp(host: "127.0.0.1", port: redis.port), username: user, password: password(user)))
    }

    /// The first word of Redis's refusal of `arguments`, or "ran" when it ran.
    static func refusal(_ connection: RedisConnection, _ arguments: [String]) -> String {
        do {
            _ = try connection.command(arguments)
            return "ran"
        } catch {
            return String(error.message.prefix { $0 != " " })
        }
    }

    /// The `last-delivered-id` of `group` on `stream` (XINFO GROUPS).
    static func lastDeliveredID(_ connection: RedisConnection, _ stream: String, _ group: String) throws -> String? {
        try WebhookStack.groups(stream, on: connection).first { $0["name"]?.string == group }?["last-delivered-id"]?
            .string
    }

    static func notification(
        _ type: String, jti: String, at now: Int64, subject: String = "001234.abc", email: String? = nil
    ) -> VerifiedNotification {
        VerifiedNotification(
            clientID: "com.example.app", subject: subject, type: NotificationEventType(rawType: type), rawType: type,
            eventTimeMilliseconds: now, tokenID: jti, issuedAt: now / 1000, expiresAt: nil, email: email,
            isPrivateEmail: email.map { $0.hasSuffix("privaterelay.appleid.com") })
    }

    @Test("the file defines one user per process, none able to log in until given a password")
    func shippedUsers() throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        let admin = redis.unixSocketConnection()
        let text = try String(contentsOfFile: Self.shippedFile, encoding: .utf8)
        let names = text.split(separator: "\n").filter { $0.hasPrefix("user ") }.map {
            String($0.split(separator: " ")[1])
        }
        #expect(names == ["siwa-serve", "siwa-deliver", "siwa-operator", "siwa-reader", "siwa-deletions"])
        for line in text.split(separator: "\n") where line.hasPrefix("user ") {
            _ = try admin.command(["ACL", "SETUSER"] + line.split(separator: " ").dropFirst().map(String.init))
        }
        for name in names {
            // As shipped: on, and no password, so AUTH is refused whatever is sent.
            #expect(Self.refusal(admin, ["AUTH", name, ""]) == "WRONGPASS")
            #expect(Self.refusal(admin, ["AUTH", name, Self.password(name)]) == "WRONGPASS")
        }
    }

    @Test("serve applies and deliver delivers, each as its user; the deliverer cannot add an event or a deletion")
    func serveAndDeliver() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        try Self.loadShippedUsers(stack.test)
        let serveEndpoint = try RedisEndpoint(parsing: Self.url("siwa-serve", stack.redis))
        #expect(
            RedisCapabilityCheck.run(
                endpoint: serveEndpoint, timeout: .seconds(2), keyPrefix: "siwa", streamMaximumLength: 1000) == .ready)
        let billing = try stack.receiver("billing")
        let down = try stack.receiver("down")
        try down.plan(default: ["status": .integer(503)])
        let environment = try stack.environment(
            [
                stack.destination("billing", billing, extra: [("include_email", .bool(true))]),
                stack.destination("down", down, extra: [("types", .array([.string("consent-revoked")]))]),
            ],
            ["SIWA_REDIS_URL": Self.url("siwa-deliver", stack.redis), "SIWA_WEBHOOK_RETRY_SCALE": "0.00001"])
        let deliverer = try stack.startDeliverer(environment)

        let serve = NotificationStore(connection: Self.connection("siwa-serve", stack.redis), streamMaximumLength: 1000)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        _ = try serve.apply(Self.notification("consent-revoked", jti: "u-1", at: now), receivedAt: now)
        _ = try serve.apply(
            Self.notification(
                "email-enabled", jti: "u-2", at: now, subject: "001234.mail", email: "x@privaterelay.appleid.com"),
            receivedAt: now)
        _ = try serve.apply(Self.notification("account-deleted", jti: "u-3", at: now), receivedAt: now)
        // serve's other writes and reads: the clients hash, WAIT (SIWA_REDIS_MIN_REPLICAS).
        try serve.recordClientNotification(clientID: "com.example.app", at: now)
        #expect(try serve.clientActivity(clientIDs: ["com.example.app"], now: now).count == 1)
        #expect(try serve.connection.command("WAIT", "0", "1").integer == 0)

        #expect(waitUntil(timeout: 10) { Set(billing.ids()) == ["u-1", "u-2", "u-3"] })
        let email = try #require(billing.records().first { WebhookDeliveryTests.string($0, "id") == "u-2" })
        #expect(WebhookDeliveryTests.string(email, "body")?.contains(#""email":"x@privaterelay.appleid.com""#) == true)
        // The retries, then the failed record (its XADD on siwa:deliver:down:failed) and the acknowledgement.
        #expect(
            waitUntil(timeout: 20) {
                (try? deliverer.metrics()[#"siwa_webhook_exhausted_total{destination="down"}"#]) == 1
            })
        #expect(waitUntil(timeout: 5) { (try? stack.pending("deliver:billing")) == 0 })
        #expect(try stack.pending("deliver:billing", stream: "siwa:deletions") == 0)
        #expect(try stack.pending("deliver:down") == 0)
        #expect(try stack.test.command("XLEN", "siwa:deliver:down:failed").integer == 1)
        #expect(!deliverer.lines().contains { $0.contains("NOPERM") }, "\(deliverer.lines())")
        let status = try CommandRun.endpoint(["deliver", "status"], environment: environment)
        #expect(status.status == 0, "\(status.errors)")
        #expect(status.output.contains("failed_after_retries=1"), "\(status.output)")

        let asDeliverer = Self.connection("siwa-deliver", stack.redis)
        // The app's deletion worker's group: XCLAIM's LASTID would move it past every deletion to come.
        _ = try stack.test.command("XGROUP", "CREATE", "siwa:deletions", "account-cleanup", "0")
        for forbidden in [
            ["XADD", "siwa:events", "*", "type", "account-deleted", "client_id", "com.example.app", "sub", "x"],
            ["XADD", "siwa:deletions", "*", "type", "account-deleted", "client_id", "com.example.app", "sub", "x"],
            ["HSET", "siwa:user:{com.example.app:001234.abc}", "sessions_revoked_at", "1"],
            ["PUBLISH", "siwa:notifications", "{}"], ["EVAL", "return 1", "0"], ["DEL", "siwa:events"],
            ["XGROUP", "SETID", "siwa:events", "deliver:billing", "0"], ["XTRIM", "siwa:events", "MAXLEN", "0"],
            ["XCLAIM", "siwa:deletions", "account-cleanup", "x", "0", "0-1", "LASTID", "9999999999999-0"],
            ["XAUTOCLAIM", "siwa:deletions", "account-cleanup", "x", "0", "0-0"],
        ] {
            #expect(Self.refusal(asDeliverer, forbidden) == "NOPERM", "\(forbidden)")
        }
        #expect(try Self.lastDeliveredID(stack.test, "siwa:deletions", "account-cleanup") == "0-0")
        // Key patterns do not filter SCAN and RANDOMKEY: they would name every key, the apps' own too.
        for forbidden in [["SCAN", "0"], ["RANDOMKEY"]] {
            #expect(Self.refusal(serve.connection, forbidden) == "NOPERM", "serve: \(forbidden)")
            #expect(Self.refusal(asDeliverer, forbidden) == "NOPERM", "\(forbidden)")
        }
        #expect(try stack.test.command("XLEN", "siwa:events").integer == 3)
        #expect(try stack.test.command("XLEN", "siwa:deletions").integer == 1)
        #expect(
            try stack.test.command("HGET", "siwa:user:{com.example.app:001234.abc}", "sessions_revoked_at").string
                != "1")
        deliverer.kill(SIGTERM)
        #expect(deliverer.process.terminationStatus == 0)
    }

    @Test("a deliverer given serve's user (deliver.env forgotten) logs Redis's refusal as an error, not an outage")
    func delivererUnderAnotherUser() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        try Self.loadShippedUsers(stack.test)
        let billing = try stack.receiver("billing")
        let environment = try stack.environment(
            [stack.destination("billing", billing)], ["SIWA_REDIS_URL": Self.url("siwa-serve", stack.redis)])
        let deliverer = try stack.startDeliverer(environment, reading: false)
        #expect(
            waitUntil(timeout: 5) {
                deliverer.lines().contains {
                    $0.contains(#""event":"webhook_redis_refused""#) && $0.contains(#""level":"error""#)
                        && $0.contains(#""reply":"NOPERM""#) && $0.contains("xgroup|create")
                }
            }, "\(deliverer.lines())")
        #expect(!deliverer.lines().contains { $0.contains("webhook_redis_unavailable") })
        // Logged once, not at every retry.
        Thread.sleep(forTimeInterval: 1)
        #expect(deliverer.lines().filter { $0.contains("webhook_redis_refused") }.count == 1)
        // No group, so not reading: an event recorded now would not be the destination's.
        #expect(!deliverer.lines().contains { $0.contains("webhook_destination_reading") })
        deliverer.kill(SIGTERM)
        #expect(deliverer.process.terminationStatus == 0)
    }

    @Test("readers read and subscribe; the deletion worker drains its group; neither can write an event or a user")
    func readersAndDeletionWorker() throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        let admin = redis.unixSocketConnection()
        try Self.loadShippedUsers(admin)
        let serve = NotificationStore(connection: Self.connection("siwa-serve", redis), streamMaximumLength: 1000)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        _ = try serve.apply(Self.notification("account-deleted", jti: "r-1", at: now), receivedAt: now)
        let user = "siwa:user:{com.example.app:001234.abc}"

        let reader = Self.connection("siwa-reader", redis)
        #expect(try reader.command("HGET", user, "account_deleted_at").string == String(now))
        #expect(try reader.command("XRANGE", "siwa:events", "-", "+").array?.count == 1)
        #expect(try reader.command("XREVRANGE", "siwa:deletions", "+", "-", "COUNT", "1").array?.count == 1)
        #expect(try reader.command("SUBSCRIBE", "siwa:notifications").array?.count == 3)
        let forbiddenToEveryReader: [[String]] = [
            ["XADD", "siwa:events", "*", "type", "account-deleted"], ["XADD", "siwa:deletions", "*", "f", "v"],
            ["HSET", user, "sessions_revoked_at", "1"], ["DEL", user], ["PUBLISH", "siwa:notifications", "{}"],
            ["SET", "siwa:seen:{com.example.app:001234.abc}:r-2", "1"], ["EVAL", "return 1", "0"],
            ["XTRIM", "siwa:deletions", "MAXLEN", "0"], ["XDEL", "siwa:deletions", "0-1"], ["SCAN", "0"],
            ["RANDOMKEY"],
        ]
        let freshReader = Self.connection("siwa-reader", redis)
        for forbidden in forbiddenToEveryReader + [["XGROUP", "CREATE", "siwa:deletions", "app", "0"]] {
            #expect(Self.refusal(freshReader, forbidden) == "NOPERM", "reader: \(forbidden)")
        }

        // The deletion worker of examples/python/siwa_deletions.py: its group, read, acknowledge.
        let worker = Self.connection("siwa-deletions", redis)
        _ = try worker.command("XGROUP", "CREATE", "siwa:deletions", "app", "0", "MKSTREAM")
        let read = try worker.command(
            "XREADGROUP", "GROUP", "app", "w1", "COUNT", "10", "STREAMS", "siwa:deletions", ">")
        let entryID = try #require(read.array?.first?.array?.last?.array?.first?.array?.first?.string)
        #expect(try worker.command("XACK", "siwa:deletions", "app", entryID).integer == 1)
        // Another group on the stream (a deliverer's): XCLAIM's LASTID would move it past every deletion.
        _ = try admin.command("XGROUP", "CREATE", "siwa:deletions", "deliver:billing", "0")
        let skipAhead = ["XCLAIM", "siwa:deletions", "deliver:billing", "w1", "0", "0-1", "LASTID", "9999999999999-0"]
        for forbidden in forbiddenToEveryReader + [skipAhead] {
            #expect(Self.refusal(worker, forbidden) == "NOPERM", "deletion worker: \(forbidden)")
        }
        #expect(try Self.lastDeliveredID(admin, "siwa:deletions", "deliver:billing") == "0-0")
        #expect(try admin.command("XLEN", "siwa:events").integer == 1)
        #expect(try admin.command("XLEN", "siwa:deletions").integer == 1)
        #expect(try admin.command("HGET", user, "sessions_revoked_at").string == String(now))
    }

    @Test(
        "the example readers (Python, Node.js, Ruby): state as siwa-reader, the deletion queue drained as siwa-deletions",
        arguments: ExampleReaderTests.Reader.allCases)
    func exampleReaders(_ reader: ExampleReaderTests.Reader) throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        let admin = redis.unixSocketConnection()
        try Self.loadShippedUsers(admin)
        let serve = NotificationStore(connection: Self.connection("siwa-serve", redis), streamMaximumLength: 1000)
        let deletedAt: Int64 = 1_796_000_001_000
        _ = try serve.apply(Self.notification("account-deleted", jti: "x-1", at: deletedAt), receivedAt: deletedAt)
        let state = try ExampleFiles.flatJSON(
            try reader.run(
                "state",
                [
                    "--redis-url", Self.url("siwa-reader", redis), "--client-id", "com.example.app", "--sub",
                    "001234.abc", "--session-started-at", String(deletedAt - 1),
                ]))
        #expect(state["session_valid"] == "false", "\(state)")
        let handled = try reader.run("deletions", ["--redis-url", Self.url("siwa-deletions", redis)])
        #expect(
            try handled.split(separator: "\n").map { try ExampleFiles.flatJSON(String($0)) } == [
                ["client_id": "com.example.app", "sub": "001234.abc", "event_time": String(deletedAt)]
            ])
        #expect(try reader.run("deletions", ["--redis-url", Self.url("siwa-deletions", redis)]).isEmpty)
        #expect(try admin.command("XLEN", "siwa:deletions").integer == 1)
    }

    @Test(
        "the operator's commands: reconcile's and revoke's record, transfer's scripts, user and deletions as siwa-operator"
    )
    func operatorCommands() throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        let admin = redis.unixSocketConnection()
        try Self.loadShippedUsers(admin)
        let operatorConnection = Self.connection("siwa-operator", redis)
        let reconcile = ReconcileStore(connection: operatorConnection, streamMaximumLength: 1000)
        let checkedAt = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(
            try reconcile.record(
                clientID: "com.example.app", subject: "001234.abc", refused: true, checkedAt: checkedAt))
        #expect(try reconcile.wasCheckedRecently(clientID: "com.example.app", subject: "001234.abc"))
        #expect(
            try reconcile.recordRevocation(clientID: "com.example.app", subject: "001234.def", revokedAt: checkedAt))
        #expect(try admin.command("XLEN", "siwa:events").integer == 2)
        // transfer's scripts: the window, a pending identifier, an export and an import.
        let transfer = TransferStore(connection: operatorConnection, keyPrefix: "siwa", clientID: "com.example.app")
        let expiresAt = checkedAt + 86_400_000
        #expect(
            try transfer.recordWindow(date: checkedAt, target: "TEAMB12345", replacing: false, at: checkedAt)
                == checkedAt)
        #expect(
            try transfer.markPending(
                "001234.abc", direction: .export, target: "TEAMB12345", legacyTarget: nil, expiresAt: expiresAt)
                == nil)
        try transfer.recordExport(
            subject: "001234.abc", target: "TEAMB12345", transferSubject: "t-1", error: nil, at: checkedAt,
            expiresAt: expiresAt)
        _ = try transfer.recordImport(
            transferSubject: "t-1", subject: "009999.new", error: nil, fromSubject: "001234.abc", at: checkedAt,
            expiresAt: expiresAt)
        #expect(
            try admin.command("HGET", "siwa:user:{com.example.app:001234.abc}", "transferred_to").string == "009999.new"
        )
        let environment = ["SIWA_REDIS_URL": Self.url("siwa-operator", redis), "PATH": "/usr/bin:/bin"]
        let user = try CommandRun.endpoint(["user", "com.example.app", "001234.abc"], environment: environment)
        #expect(user.status == 0, "\(user.errors)")
        #expect(user.output.contains(String(checkedAt)), "\(user.output)")
        let deletions = try CommandRun.endpoint(["deletions"], environment: environment)
        #expect(deletions.status == 0, "\(deletions.errors)")
        for forbidden in [
            ["FLUSHALL"], ["CONFIG", "SET", "appendonly", "no"], ["KEYS", "*"], ["SET", "other:key", "1"],
            ["SCAN", "0"], ["RANDOMKEY"],
        ] {
            #expect(Self.refusal(operatorConnection, forbidden) == "NOPERM", "\(forbidden)")
        }
    }
}
