import Foundation
import SIWAJSON
import SIWARedis
import Testing

/// The deletion duty as a team sees it: the real responder's /metrics and the `deletions`
/// command, on state the real responder wrote into a real redis-server.
@Suite("The deletion duty: /metrics and `deletions`", .serialized)
struct DeletionDutyServeTests {
    static func metricValue(_ text: String, _ series: String) -> String? {
        text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.map { String($0.dropFirst(series.count + 1)) }
    }

    func deletions(_ stack: ServeStack, _ words: [String]) throws -> CommandRun {
        try CommandRun.endpoint(["deletions"] + words, environment: ["SIWA_REDIS_URL": stack.redis.url()])
    }

    @Test("/metrics: no group while a deletion waits, then the group's pending count; fast while Redis is down")
    func metricsFollowTheStream() throws {
        // A Redis command may take 3 s here: a scrape that waited on Redis would show it.
        let stack = try ServeStack(extraEnvironment: ["SIWA_REDIS_TIMEOUT_MS": "3000"])
        defer { stack.shutdown() }
        // The first reading is taken as the socket starts listening; until then only its age (NaN).
        var before = ""
        #expect(
            try stack.waitUntil(timeout: 30) {
                before = try stack.request("GET", "/metrics").bodyText
                return Self.metricValue(before, "siwa_deletions_reading_age_seconds") != "NaN"
            })
        #expect(Self.metricValue(before, "siwa_deletions_stream_entries") == "0")
        #expect(Self.metricValue(before, "siwa_deletions_consumer_groups") == "0")
        #expect(try stack.post(try stack.body(type: "account-deleted", sub: "000040.d.0001")).status == 200)
        // A stored account-deleted nudges the reading: no wait for the next tick.
        #expect(
            try stack.waitUntil(timeout: 30) {
                Self.metricValue(try stack.request("GET", "/metrics").bodyText, "siwa_deletions_stream_entries") == "1"
            })
        let connection = stack.redisConnection()
        _ = try connection.command("XGROUP", "CREATE", "siwa:deletions", "account-cleanup", "0")
        #expect(try stack.post(try stack.body(type: "account-deleted", sub: "000040.d.0002")).status == 200)
        #expect(
            try stack.waitUntil(timeout: 30) {
                let text = try stack.request("GET", "/metrics").bodyText
                return Self.metricValue(text, "siwa_deletions_consumer_groups") == "1"
                    && Self.metricValue(text, #"siwa_deletions_pending{group="account-cleanup"}"#) == "2"
            })
        let text = try stack.request("GET", "/metrics").bodyText
        let age = try #require(
            Self.metricValue(text, #"siwa_deletions_oldest_pending_age_seconds{group="account-cleanup"}"#).flatMap(
                Double.init))
        #expect(age >= 0 && age < 600)

        // Redis gone: the scrape answers at once with the last reading.
        stack.redis.send(SIGSTOP)
        defer { stack.redis.send(SIGCONT) }
        let started = ContinuousClock.now
        let during = try stack.request("GET", "/metrics")
        #expect(ContinuousClock.now - started < .seconds(1))
        #expect(during.status == 200)
        #expect(Self.metricValue(during.bodyText, "siwa_deletions_stream_entries") == "2")
    }

    @Test(
        "`deletions`: unread with no group (exit 1), then per group each pending one, its consumer, and the threshold")
    func auditCommand() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let connection = stack.redisConnection()
        let empty = try deletions(stack, [])
        #expect(empty.status == 0, "\(empty.errors)")
        #expect(empty.lines.first == "siwa:deletions: 0 entries, 0 consumer group(s)")

        // Two deletions recorded ten days ago (entry IDs carry the time the endpoint recorded them).
        let tenDaysAgo = Int64(Date().timeIntervalSince1970 * 1000) - 10 * 86_400_000
        for (index, sub) in ["000041.d.0001", "000041.d.0002"].enumerated() {
            _ = try connection.command(
                "XADD", "siwa:deletions", "\(tenDaysAgo + Int64(index))-0", "client_id", ServeStack.clientID, "sub",
                sub,
                "type", "account-deleted", "raw_type", "account-deleted", "event_time", String(tenDaysAgo - 5000),
                "jti", "j\(index)", "applied", "1")
        }
        let unread = try deletions(stack, [])
        #expect(unread.status == 1)
        #expect(unread.errors.contains("2 deletions wait in siwa:deletions and no consumer group reads it"))
        #expect(unread.lines.contains("no consumer group: 2 deletion(s) wait unread, oldest 10d0h"))
        #expect(unread.lines.contains { $0.hasPrefix("  client_id=com.example.app sub=000041.d.0001 ") })

        _ = try connection.command("XGROUP", "CREATE", "siwa:deletions", "account-cleanup", "0")
        _ = try connection.command(
            "XREADGROUP", "GROUP", "account-cleanup", "worker-7", "COUNT", "1", "STREAMS", "siwa:deletions", ">")
        let listed = try deletions(stack, ["--older-than", "11d"])
        #expect(listed.status == 0, "\(listed.errors)")
        #expect(listed.lines.contains("group account-cleanup: 2 pending (1 delivered, 1 not yet), oldest 10d0h"))
        #expect(
            listed.lines.contains {
                $0.contains("sub=000041.d.0001 ") && $0.contains(" age=10d0h consumer=worker-7 deliveries=1 ")
            })
        #expect(
            listed.lines.contains { $0.contains("sub=000041.d.0002 ") && $0.contains(" consumer=- deliveries=0 ") })

        let overdue = try deletions(stack, ["--older-than", "7d", "--json"])
        #expect(overdue.status == 1)
        let document = try StrictJSONParser.parse(Array(overdue.output.utf8))
        guard case .object(let members) = document, case .array(let groups)? = members["groups"],
            case .object(let group)? = groups.first, case .array(let pending)? = group["deletions"],
            case .object(let first)? = pending.first
        else {
            Issue.record("not the JSON document: \(overdue.output)")
            return
        }
        #expect(members["overdue"] == .bool(true))
        #expect(group["pending"] == .integer(2))
        #expect(first["consumer"] == .string("worker-7"))
        #expect(first["sub"] == .string("000041.d.0001"))
        #expect(first["event_time"] == .integer(tenDaysAgo - 5000))
        #expect(first["deliveries"] == .integer(1))

        let missing = try deletions(stack, ["--group", "nobody"])
        #expect(missing.status == 1)
        #expect(missing.errors.contains("no consumer group nobody reads siwa:deletions"))

        stack.redis.stop()
        let down = try deletions(stack, [])
        #expect(down.status == 3)
        #expect(down.errors.contains("Redis did not answer"))
    }
}
