import Foundation
import Testing

/// docs/deployment.md recommends Redis' own `min-replicas-to-write` on replicated data nodes: a
/// primary without enough replicas refuses writes with `NOREPLICAS`. The endpoint must
/// treat that as an outage (spool, answer 200 `spooled`, replay later), never as a refusal
/// of the record. A real redis-server with `min-replicas-to-write 1` and no replica.
@Suite("Redis min-replicas-to-write: NOREPLICAS is an outage", .serialized)
struct MinReplicasToWriteTests {
    @Test("NOREPLICAS: 200 spooled, Redis untouched, replayed once the primary takes writes again")
    func noReplicasIsSpooled() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let redis = stack.redisConnection()
        #expect(try redis.command("CONFIG", "SET", "min-replicas-to-write", "1").string == "OK")

        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.noreplicas.a"))
        #expect(response.status == 200)
        #expect(response.jsonFields["status"] == "spooled")
        #expect(try stack.redisSnapshot() == [])
        #expect(stack.serve?.logLines(event: "spool_record_rejected") == [])

        #expect(try redis.command("CONFIG", "SET", "min-replicas-to-write", "0").string == "OK")
        #expect(
            try stack.waitUntil(timeout: 30) {
                try stack.userHash(sub: "001.noreplicas.a")["last_event_type"] == "consent-revoked"
            })
        #expect(
            try stack.waitUntil(timeout: 30) {
                try stack.health().jsonFields["spool_depth"] == "0"
            })
        #expect(try stack.streamLength() == 1)
        #expect(stack.serve?.logLines(event: "spool_record_rejected") == [])
    }
}
