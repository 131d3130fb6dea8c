import Dispatch
import Foundation
import SIWARedis
import SIWASupport
import SIWAVerification
import Synchronization
import Testing

@testable import SIWAStore
@testable import SIWATelemetry

/// The deletions stream written by the apply script, and what the endpoint reads from it
/// (the reading behind /metrics and `deletions`), against a real redis-server.
@Suite("The deletions stream", .serialized)
struct DeletionStreamTests {
    typealias Store = RedisNotificationStoreTests

    static func entries(_ connection: RedisConnection, _ key: String) throws -> [(id: String, fields: [String: String])]
    {
        let reply = try #require(try connection.command("XRANGE", key, "-", "+").array)
        return try reply.map { entry in
            let parts = try #require(entry.array)
            return (try #require(parts.first?.string), try #require(parts.last?.fieldMap))
        }
    }

    @Test("each accepted account-deleted (either spelling, stale too) gets the events entry's copy; nothing else does")
    func onlyDeletionsAreCopied() throws {
        let fixture = try Store.Fixture()
        defer { fixture.close() }
        let store = fixture.store
        let applied: [(String, Int64, String, NotificationStore.Outcome)] = [
            ("consent-revoked", 1_700_000_000_000, "jti-c", .applied),
            ("account-delete", 1_700_000_100_000, "jti-d1", .applied),
            ("email-disabled", 1_700_000_200_000, "jti-e", .stale),
            ("some-new-type", 1_700_000_300_000, "jti-u", .recorded),
            ("account-delete", 1_700_000_100_000, "jti-d1", .duplicate),
            ("account-deleted", 1_700_000_050_000, "jti-d2", .stale),
        ]
        for (type, time, jti, outcome) in applied {
            #expect(
                try store.apply(Store.notification(type, at: time, jti: jti), receivedAt: Store.receivedAt) == outcome)
        }
        let deletions = try Self.entries(fixture.connection, "siwa:deletions").map(\.fields)
        #expect(
            deletions == [
                Store.streamEntry("account-deleted", "account-delete", 1_700_000_100_000, "jti-d1", applied: true),
                Store.streamEntry("account-deleted", "account-deleted", 1_700_000_050_000, "jti-d2", applied: false),
            ])
        // The same fields as the events stream's entries for those notifications.
        #expect(try fixture.streamEntries().filter { $0["type"] == "account-deleted" } == deletions)
    }

    @Test("a deletions key of another type refuses an account-deleted before any write; other types still apply")
    func wrongTypeDeletionsKeyWritesNothing() throws {
        let fixture = try Store.Fixture()
        defer { fixture.close() }
        _ = try fixture.connection.command("SET", "siwa:deletions", "not a stream")
        #expect {
            try fixture.store.apply(
                Store.notification("account-deleted", at: 1_700_000_100_000, jti: "jti-d"), receivedAt: Store.receivedAt
            )
        } throws: { error in
            (error as? RedisError)?.message.contains(
                "WRONGTYPE the deletions key siwa:deletions holds a string, not a stream") == true
        }
        #expect(try fixture.connection.command("EXISTS", fixture.userKey).integer == 0)
        #expect(try fixture.connection.command("XLEN", "siwa:events").integer == 0)
        let seen = try fixture.connection.command("KEYS", "siwa:seen:*").array ?? []
        #expect(seen.isEmpty)
        #expect(
            try fixture.store.apply(
                Store.notification("consent-revoked", at: 1_700_000_000_000, jti: "jti-c"), receivedAt: Store.receivedAt
            )
                == .applied)
        #expect(try fixture.connection.command("GET", "siwa:deletions").string == "not a stream")
    }

    @Test("the reading: no group; then per group the delivered, the undelivered, and the oldest unacknowledged")
    func readingPerGroup() throws {
        let fixture = try Store.Fixture()
        defer { fixture.close() }
        let connection = fixture.connection
        #expect(
            try DeletionDutyReading.read(connection, key: "siwa:deletions")
                == DeletionDutyReading(entries: 0, oldestEntryAt: nil, groups: []))
        // Recorded at known times (the entry ID's time is when the endpoint recorded it).
        for (index, id) in ["1700000000000-0", "1700000100000-0", "1700000200000-0"].enumerated() {
            _ = try connection.command("XADD", "siwa:deletions", id, "client_id", "c", "sub", "s\(index)")
        }
        #expect(
            try DeletionDutyReading.read(connection, key: "siwa:deletions")
                == DeletionDutyReading(entries: 3, oldestEntryAt: 1_700_000_000_000, groups: []))
        _ = try connection.command("XGROUP", "CREATE", "siwa:deletions", "cleanup", "0")
        _ = try connection.command("XGROUP", "CREATE", "siwa:deletions", "caught-up", "$")
        _ = try connection.command(
            "XREADGROUP", "GROUP", "cleanup", "w1", "COUNT", "2", "STREAMS", "siwa:deletions", ">")
        _ = try connection.command("XACK", "siwa:deletions", "cleanup", "1700000000000-0")
        let reading = try DeletionDutyReading.read(connection, key: "siwa:deletions")
        #expect(reading.entries == 3)
        let groups = Dictionary(uniqueKeysWithValues: reading.groups.map { ($0.name, $0) })
        #expect(
            groups["cleanup"]
                == .init(
                    name: "cleanup", consumers: 1, delivered: 1, undelivered: 1, lastDeliveredID: "1700000100000-0",
                    oldestPendingAt: 1_700_000_100_000))
        #expect(groups["cleanup"]?.pending == 2)
        #expect(
            groups["caught-up"]
                == .init(
                    name: "caught-up", consumers: 0, delivered: 0, undelivered: 0, lastDeliveredID: "1700000200000-0",
                    oldestPendingAt: nil))
        // Everything delivered and acknowledged but one not yet delivered: its time is the oldest.
        _ = try connection.command("XACK", "siwa:deletions", "cleanup", "1700000100000-0")
        let later = try DeletionDutyReading.read(connection, key: "siwa:deletions")
        #expect(later.groups.first { $0.name == "cleanup" }?.oldestPendingAt == 1_700_000_200_000)
        #expect(later.groups.first { $0.name == "cleanup" }?.pending == 1)
    }

    @Test("the metrics lines: the reading's figures, ages against now; only the reading's age before the first")
    func metricsLines() {
        #expect(
            ServerMetrics.renderDeletionDuty(nil, now: 1_700_000_000_000)
                == """
                # HELP siwa_deletions_reading_age_seconds Seconds since the deletions stream was last read from Redis (the deletion figures are that reading's).
                # TYPE siwa_deletions_reading_age_seconds gauge
                siwa_deletions_reading_age_seconds NaN

                """)
        let reading = DeletionDutyReading(
            entries: 3, oldestEntryAt: 1_700_000_000_000,
            groups: [
                .init(
                    name: "clean\"up", consumers: 1, delivered: 1, undelivered: 1, lastDeliveredID: "1-0",
                    oldestPendingAt: 1_700_000_100_000)
            ])
        let text = ServerMetrics.renderDeletionDuty((reading, 1_700_000_400_000), now: 1_700_000_500_000)
        let values = text.split(separator: "\n").filter { !$0.hasPrefix("#") }
        #expect(
            values == [
                "siwa_deletions_reading_age_seconds 100.0", "siwa_deletions_stream_entries 3",
                "siwa_deletions_oldest_entry_age_seconds 500.0", "siwa_deletions_consumer_groups 1",
                #"siwa_deletions_pending{group="clean\"up"} 2"#,
                #"siwa_deletions_oldest_pending_age_seconds{group="clean\"up"} 400.0"#,
            ])
    }

    /// A consumer group's name is anyone's who can create a group: a CR LF in it must not
    /// break the line ("\r\n" is one Swift Character, so escaping per Character let it
    /// through raw and Prometheus refused the whole scrape). Parsed by promtool.
    @Test("a group name with CR LF, CR, a control character, a quote: escaped per scalar; promtool accepts it")
    func labelValuesWithLineBreaks() throws {
        let names = ["ops\r\nteam", "cr\ronly", "bell\u{07}tab\t", "q\"b\\s\nlf", "caf\u{E9}\u{1F600}"]
        let reading = DeletionDutyReading(
            entries: 1, oldestEntryAt: 1_700_000_000_000,
            groups: names.map {
                .init(
                    name: $0, consumers: 1, delivered: 1, undelivered: 0, lastDeliveredID: "1-0", oldestPendingAt: nil)
            })
        let text = ServerMetrics.renderDeletionDuty((reading, 1_700_000_000_000), now: 1_700_000_000_000)
        let pending = text.split(separator: "\n", omittingEmptySubsequences: false).filter {
            $0.hasPrefix("siwa_deletions_pending{")
        }
        #expect(
            pending == [
                #"siwa_deletions_pending{group="ops\\u000D\nteam"} 1"#,
                #"siwa_deletions_pending{group="cr\\u000Donly"} 1"#,
                #"siwa_deletions_pending{group="bell\\u0007tab\\u0009"} 1"#,
                #"siwa_deletions_pending{group="q\"b\\s\nlf"} 1"#,
                "siwa_deletions_pending{group=\"caf\u{E9}\u{1F600}\"} 1",
            ])
        #expect(!text.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" }, "no raw control character")
        let promtool = "/usr/bin/promtool"
        try #require(
            FileManager.default.isExecutableFile(atPath: promtool),
            "promtool is needed (scripts/install-deps installs prometheus)")
        let checked = try CommandRun.run(
            URL(fileURLWithPath: promtool), ["check", "metrics"], input: Data(text.utf8), timeout: .seconds(30))
        #expect(checked.status == 0, "promtool: \(checked.output)\(checked.errors)")
    }

    @Test("the monitor keeps its last reading while Redis is down, and its metrics never wait on Redis")
    func monitorKeepsTheLastReading() throws {
        let fixture = try Store.Fixture()
        defer { fixture.close() }
        _ = try fixture.connection.command("XADD", "siwa:deletions", "1700000000000-0", "sub", "s")
        let clockNow = Mutex<Int64>(1_700_000_100_000)
        let clock = EndpointClock(
            monotonic: { ContinuousClock.now }, wallMilliseconds: { clockNow.withLock { $0 } })
        let monitor = DeletionDutyMonitor(
            connection: RedisConnection(
                endpoint: try RedisEndpoint(parsing: fixture.server.url()), connectTimeout: .milliseconds(500),
                commandTimeout: .milliseconds(500)),
            key: "siwa:deletions", clock: clock)
        monitor.readOnce()
        #expect(monitor.lastReading?.reading.entries == 1)
        #expect(monitor.lastReading?.readAt == 1_700_000_100_000)
        fixture.server.stop()
        clockNow.withLock { $0 = 1_700_000_200_000 }
        monitor.readOnce()
        #expect(monitor.lastReading?.readAt == 1_700_000_100_000)
        let started = ContinuousClock.now
        let text = monitor.metricsText(now: 1_700_000_200_000)
        #expect(ContinuousClock.now - started < .milliseconds(100))
        #expect(text.contains("siwa_deletions_reading_age_seconds 100.0\n"))
        #expect(text.contains("siwa_deletions_stream_entries 1\n"))
        #expect(text.contains("siwa_deletions_oldest_entry_age_seconds 200.0\n"))
    }

    @Test(
        "the monitor reads the app transfer windows of the served client IDs: time left and users pending in /metrics")
    func monitorReadsTransferWindows() throws {
        let fixture = try Store.Fixture()
        defer { fixture.close() }
        let store = TransferStore(connection: fixture.connection, keyPrefix: "siwa", clientID: "com.example.app")
        // A transfer ten days ago (its records expire a year after it).
        let date = Int64(Date().timeIntervalSince1970 * 1000) - 10 * 86_400_000
        let expiry = date + 365 * 86_400_000
        _ = try store.recordWindow(date: date, target: "RECIPIENT1", replacing: false, at: date)
        for sub in ["000080.a", "000080.b", "000080.c"] {
            _ = try store.markPending(
                sub, direction: .export, target: "RECIPIENT1", legacyTarget: "RECIPIENT1", expiresAt: expiry)
        }
        try store.recordExport(
            subject: "000080.a", target: "RECIPIENT1", transferSubject: "tr.80.a", error: nil, at: date + 1000,
            expiresAt: expiry)
        let monitor = DeletionDutyMonitor(
            connection: RedisConnection(endpoint: try RedisEndpoint(parsing: fixture.server.url())),
            key: "siwa:deletions", clock: .system,
            transfers: (RedisKeyLayout(), ["com.example.app", "com.example.other"]))
        monitor.readOnce()
        // 10 days before the window closes (60 days after the transfer date).
        let text = monitor.metricsText(now: date + 50 * 86_400_000)
        #expect(text.contains("siwa_transfer_window_seconds_left{client_id=\"com.example.app\"} 864000.0\n"))
        #expect(text.contains("siwa_transfer_users_pending{client_id=\"com.example.app\",direction=\"export\"} 2\n"))
        #expect(text.contains("siwa_transfer_users_pending{client_id=\"com.example.app\",direction=\"import\"} 0\n"))
        #expect(!text.contains("com.example.other"), "no series for a client ID without a transfer")
    }

    @Test(
        "a nudge reads again within a second (gathered: at most one reading a second), long before the next tick; a stop ends the service"
    )
    func nudgeReadsAtOnce() throws {
        let fixture = try Store.Fixture()
        defer { fixture.close() }
        let monitor = DeletionDutyMonitor(
            connection: RedisConnection(endpoint: try RedisEndpoint(parsing: fixture.server.url())),
            key: "siwa:deletions", interval: .seconds(3600), clock: .system)
        let finished = DispatchSemaphore(value: 0)
        Thread {
            monitor.run()
            finished.signal()
        }.start()
        defer {
            monitor.requestStop()
            #expect(finished.wait(timeout: .now() + 30) == .success, "the service stops when asked")
        }
        func waitFor(_ entries: Int) -> Bool {
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline {
                if monitor.lastReading?.reading.entries == entries { return true }
                usleep(20_000)
            }
            return false
        }
        #expect(waitFor(0), "the first reading, at start")
        _ = try fixture.store.apply(
            Store.notification("account-deleted", at: 1_700_000_000_000, jti: "jti-n"), receivedAt: Store.receivedAt)
        monitor.nudge()
        #expect(waitFor(1), "read again after the nudge, not an hour later")
    }

    @Test("an entry deleted before the group read it: Redis gives no lag, the undelivered are counted instead")
    func readingWithoutLag() throws {
        let fixture = try Store.Fixture()
        defer { fixture.close() }
        let connection = fixture.connection
        for id in ["1700000000000-0", "1700000100000-0", "1700000200000-0", "1700000300000-0"] {
            _ = try connection.command("XADD", "siwa:deletions", id, "sub", id)
        }
        _ = try connection.command("XGROUP", "CREATE", "siwa:deletions", "cleanup", "0")
        _ = try connection.command(
            "XREADGROUP", "GROUP", "cleanup", "w1", "COUNT", "1", "STREAMS", "siwa:deletions", ">")
        _ = try connection.command("XDEL", "siwa:deletions", "1700000200000-0")
        let info = try #require(try connection.command("XINFO", "GROUPS", "siwa:deletions").array?.first?.array)
        #expect(info.last == .null, "Redis cannot say the lag now")
        let group = try #require(try DeletionDutyReading.read(connection, key: "siwa:deletions").groups.first)
        #expect(group.delivered == 1 && group.undelivered == 2 && group.pending == 3)
        #expect(group.oldestPendingAt == 1_700_000_000_000)
    }
}
