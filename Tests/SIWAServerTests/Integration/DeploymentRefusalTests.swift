import Foundation
import SIWATestKit
import Testing

@testable import SIWARedis
@testable import SIWAStore

/// Refusals about the deployment are never taken for refusals about one record: a shared
/// key of the wrong type, and a `PUBLISH` or `WAIT` this Redis user may not run. The real
/// `serve` binary against real redis-servers (a primary, a replica, ACL users); the test
/// kit's key stands in for Apple's.
@Suite("Deployment refusals, end to end", .serialized)
struct DeploymentRefusalTests {
    /// The issue's reproduction: another program wrote a string at `siwa:events`. Decided: the
    /// notifications are answered 200 `spooled` and wait, in order (never set aside): replay
    /// is blocked naming the key, /healthz is 503 naming it; once the key is deleted, each is
    /// applied once.
    @Test("an events key of the wrong type: spooled and blocked, /healthz 503 names it, applied once it is deleted")
    func wrongTypeEventsKeyBlocksReplay() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let admin = stack.redisConnection()
        _ = try admin.command("SET", "siwa:events", "not a stream")
        let subs = (1...3).map { String(format: "000031.w.%04d", $0) }
        for sub in subs {
            let response = try stack.post(try stack.body(type: "consent-revoked", sub: sub))
            #expect(response.status == 200)
            #expect(response.bodyText == #"{"status":"spooled"}"#)
        }
        #expect(
            try stack.waitUntil(timeout: 15) {
                let health = try stack.health()
                return health.status == 503 && (health.jsonFields["reason"] ?? "").contains("siwa:events")
            })
        let health = try stack.health()
        #expect(health.jsonFields["redis"] == "ok")
        #expect(health.jsonFields["spool_depth"] == "3")
        #expect(
            health.jsonFields["reason"]
                == "spool replay blocked: Redis refuses the spooled records (WRONGTYPE): WRONGTYPE the events key "
                + "siwa:events holds a string, not a stream: every notification is refused until it is deleted or renamed"
        )
        #expect(stack.serve?.logLines(event: "spool_replay_blocked").first?.contains("siwa:events") == true)
        #expect(stack.serve?.logLines(event: "spool_record_rejected") == [])
        let status = try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)
        #expect(status["depth"] == "3")
        #expect(status["rejected"] == "0")
        #expect(try stack.redisSnapshot() == ["siwa:events=string"])

        // The operator removes the key: every record is applied, once, and /healthz is 200.
        _ = try admin.command("DEL", "siwa:events")
        #expect(try stack.waitUntil(timeout: 15) { try stack.streamLength() == 3 })
        #expect(try stack.waitUntil(timeout: 10) { try stack.health().status == 200 })
        for sub in subs { #expect(try stack.userHash(sub: sub)["last_event_type"] == "consent-revoked") }
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["rejected"] == "0")
        #expect(stack.serve?.logLines(event: "spool_replay_unblocked").count == 1)
    }

    /// `serve` and `serve --check` look at `TYPE` of the two stream keys: exit 2, one JSON line
    /// naming the key, the key left as it was.
    @Test("at start: an events or deletions key of the wrong type stops serve and serve --check, naming the key")
    func wrongTypeEventsKeyRefusedAtStart() throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        let admin = RedisConnection(endpoint: try RedisEndpoint(parsing: redis.url()))
        for (name, key) in [("events", "siwa:events"), ("deletions", "siwa:deletions")] {
            _ = try admin.command("HSET", key, "f", "v")
            for arguments in [["serve", "--check"], ["serve"]] {
                let result = try CommandRun.endpoint(
                    arguments, environment: SpoolDeadEndTests.serveEnvironment(redisURL: redis.url()))
                let run = arguments.joined(separator: " ") + " (\(key))"
                #expect(result.status == 2, "\(run): \(result.errors)")
                #expect(result.output.isEmpty, "\(run)")
                let lines = result.errors.split(separator: "\n").filter { $0.hasPrefix("{") }
                #expect(lines.count == 1, "\(run): \(result.errors)")
                let line = String(lines.first ?? "")
                #expect(line.contains(#""event":"configuration_invalid","setting":"SIWA_REDIS_URL""#), "\(run)")
                #expect(line.contains("the \(name) key \(key) holds a hash, not a stream"), "\(run): \(line)")
                #expect(!result.errors.contains(#""event":"started""#), "\(run)")
            }
            #expect(try admin.command("TYPE", key).string == "hash")
            #expect(try admin.command("DBSIZE").integer == 1)
            _ = try admin.command("DEL", key)
        }
    }

    /// The user's own hash of the wrong type is about that record: the live answer is 503
    /// `store_refused` (Apple retries), nothing is spooled or written; Apple's retry after the
    /// key is removed is applied.
    @Test("the user's hash of the wrong type: 503 store_refused, nothing spooled; the retry after the fix applies")
    func wrongTypeUserKeyIsRefusedLive() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let admin = stack.redisConnection()
        let userKey = "siwa:user:{\(ServeStack.clientID):000032.u.0001}"
        _ = try admin.command("SET", userKey, "not a hash")
        let body = try stack.body(type: "consent-revoked", sub: "000032.u.0001")
        let refused = try stack.post(body)
        #expect(refused.status == 503)
        #expect(refused.jsonFields == ["status": "unavailable", "error": "store_refused"])
        #expect(refused.header("Retry-After") == "30")
        #expect(try stack.redisSnapshot() == ["\(userKey)=string"])
        let status = try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)
        #expect(status["depth"] == "0")
        #expect(status["rejected"] == "0")
        let logged = stack.serve?.logLines(event: "redis_record_refused") ?? []
        #expect(logged.count == 1)
        #expect(logged.first?.contains(RedisError.userKeyWrongTypeReply) == true)
        #expect(try stack.health().status == 200)

        _ = try admin.command("DEL", userKey)
        #expect(try stack.post(body).bodyText == #"{"status":"applied"}"#)
        #expect(try stack.userHash(sub: "000032.u.0001")["last_event_type"] == "consent-revoked")
    }

    // MARK: - PUBLISH and WAIT refused

    /// A user without `+wait`, and one without the probe channel, with
    /// `SIWA_REDIS_MIN_REPLICAS=1`: refused at start by serve and serve --check, naming what.
    @Test("at start: a Redis user without WAIT or without the probe channel is refused with min replicas 1")
    func replicaCheckRightsRefusedAtStart() throws {
        let redis = try RedisServerProcess(password: "test-fixture-redis-password")
        defer { redis.shutdown() }
        let admin = RedisConnection(endpoint: try RedisEndpoint(parsing: redis.url()))
        _ = try admin.command(
            "ACL", "SETUSER", "nowait", "on", ">nowait-fixture-password", "~*", "&*", "+@all", "-wait")
        _ = try admin.command(
            "ACL", "SETUSER", "noprobe", "on", ">noprobe-fixture-password", "~*", "resetchannels",
            "&siwa:notifications", "+@all")
        let port = redis.port
        let cases: [(user: String, cause: String)] = [
            ("nowait", "WAIT (SIWA_REDIS_MIN_REPLICAS) refused: NOPERM"),
            ("noprobe", "PUBLISH on siwa:replication-probe (SIWA_REDIS_MIN_REPLICAS) refused: NOPERM"),
        ]
        for (user, cause) in cases {
            var environment = SpoolDeadEndTests.serveEnvironment(
                redisURL: "redis://\(user):\(user)-fixture-password@127.0.0.1:\(port)/0")
            // Without replicas asked for, the same user starts: the check is for the WAIT.
            #expect(try CommandRun.endpoint(["serve", "--check"], environment: environment).status == 0, "\(user)")
            environment["SIWA_REDIS_MIN_REPLICAS"] = "1"
            for arguments in [["serve", "--check"], ["serve"]] {
                let name = "\(user): " + arguments.joined(separator: " ")
                let result = try CommandRun.endpoint(arguments, environment: environment)
                #expect(result.status == 2, "\(name): \(result.errors)")
                let lines = result.errors.split(separator: "\n").filter { $0.hasPrefix("{") }
                #expect(lines.count == 1, "\(name): \(result.errors)")
                let line = String(lines.first ?? "")
                #expect(line.contains(#""setting":"SIWA_REDIS_URL""#), "\(name)")
                #expect(line.contains(cause), "\(name): \(line)")
                #expect(!result.errors.contains("fixture-password"), "\(name)")
            }
        }
        #expect(try admin.command("DBSIZE").integer == 0)
    }

    /// The issue's reproduction: `WAIT` taken from the user while serve runs, with a real
    /// replica. The notification is applied and answered so, its copy kept; the copy's
    /// replay is blocked naming NOPERM and `wait` (never a "shortfall"), /healthz 503 names
    /// it; once `+wait` is back the replica acknowledges and the spool drains.
    @Test("at run time: WAIT refused is a named refusal (blocked, logged, /healthz), not 0 replicas")
    func waitRefusedIsNamed() throws {
        let stack = try ServeStack(extraEnvironment: ["SIWA_REDIS_MIN_REPLICAS": "1"], startingServe: false)
        defer { stack.shutdown() }
        let replica = try RedisServerProcess()
        defer { replica.shutdown() }
        let replicaConnection = RedisConnection(endpoint: try RedisEndpoint(parsing: replica.url()))
        _ = try replicaConnection.command("REPLICAOF", "127.0.0.1", String(stack.redis.port))
        let admin = stack.redisConnection()
        #expect(
            try stack.waitUntil(timeout: 15) {
                (try admin.command("INFO", "replication").string ?? "").contains("state=online")
            }, "the replica is online")
        _ = try admin.command("ACL", "SETUSER", "siwa", "on", ">siwa-fixture-password", "~*", "&*", "+@all")
        stack.serveRedisURL = "redis://siwa:siwa-fixture-password@127.0.0.1:\(stack.redis.port)/0"
        try stack.startServe()
        _ = try admin.command("ACL", "SETUSER", "siwa", "-wait")

        let sub = "000033.v.0001"
        let response = try stack.post(try stack.body(type: "consent-revoked", sub: sub))
        #expect(response.bodyText == #"{"status":"applied"}"#)
        let refusedLines = stack.serve?.logLines(event: "redis_replica_check_refused") ?? []
        #expect(refusedLines.count == 1)
        #expect(refusedLines.first?.contains("NOPERM") == true)
        #expect(refusedLines.first?.contains("wait") == true)
        #expect(
            try stack.waitUntil(timeout: 15) {
                let health = try stack.health()
                return health.status == 503 && (health.jsonFields["reason"] ?? "").contains("NOPERM")
            })
        let reason = try stack.health().jsonFields["reason"] ?? ""
        #expect(reason.hasPrefix("spool replay blocked: Redis refuses the spooled records (NOPERM): "))
        #expect(reason.contains("'wait'"))
        #expect(reason.contains("(the answer to the replica check, PUBLISH or WAIT)"))
        #expect(stack.serve?.logLines(event: "redis_replica_shortfall") == [])
        #expect(try stack.request("GET", "/metrics").bodyText.contains("siwa_redis_replica_shortfalls_total 0\n"))
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["depth"] == "1")

        _ = try admin.command("ACL", "SETUSER", "siwa", "+wait")
        #expect(try stack.waitUntil(timeout: 15) { try stack.health().status == 200 })
        #expect(
            stack.waitUntil(timeout: 10) { (try? SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["depth"]) == "0" })
        #expect(
            try replicaConnection.command("HGET", "siwa:user:{\(ServeStack.clientID):\(sub)}", "last_event_type")
                .string == "consent-revoked")
    }
}
