import SIWARedis
import SIWAStore
import Testing

/// The reads the operator commands make through the store (`user`, `canary`, `deletions`,
/// `deliver`, `bench webhooks`), against a real redis-server: each returns exactly what
/// the keys hold, in the order the commands print it.
struct StoreReaderTests {
    static func fields(_ entries: [StoreReader.Entry]) -> [String] {
        entries.map { "\($0.id) \($0.fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" })" }
    }

    @Test("a hash and one field: what the key holds; nothing for a missing key or field")
    func hashAndField() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
        _ = try connection.command("HSET", "siwa:u", "state", "consent-revoked", "sub", "000111.abc")
        let reader = StoreReader(connection: connection)
        #expect(try reader.hash("siwa:u") == ["state": "consent-revoked", "sub": "000111.abc"])
        #expect(try reader.hash("siwa:absent") == [:])
        #expect(try reader.field("sub", of: "siwa:u") == "000111.abc")
        #expect(try reader.field("email", of: "siwa:u") == nil)
        #expect(try reader.field("sub", of: "siwa:absent") == nil)
    }

    @Test("a stream's entries: oldest first within a range, after an ID, one by its ID, the newest first")
    func streamEntries() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
        for (id, type) in [("1-1", "a"), ("2-1", "b"), ("3-1", "c")] {
            _ = try connection.command("XADD", "siwa:events", id, "type", type, "sub", "s-" + type)
        }
        let reader = StoreReader(connection: connection)
        #expect(
            Self.fields(try reader.entries(of: "siwa:events", from: "-", to: "+"))
                == ["1-1 [\"sub=s-a\", \"type=a\"]", "2-1 [\"sub=s-b\", \"type=b\"]", "3-1 [\"sub=s-c\", \"type=c\"]"])
        #expect(try reader.entries(of: "siwa:events", from: "(1-1", to: "+", limit: 1).map(\.id) == ["2-1"])
        #expect(try reader.entries(of: "siwa:events", from: "2-1", to: "2-1").map(\.id) == ["2-1"])
        #expect(try reader.entries(of: "siwa:events", from: "(3-1", to: "+", limit: 100).isEmpty)
        #expect(try reader.newestEntries(of: "siwa:events", count: 2).map(\.id) == ["3-1", "2-1"])
        #expect(try reader.entries(of: "siwa:absent", from: "-", to: "+").isEmpty)
    }

    @Test("a group's pending deliveries: each delivered, unacknowledged entry with its consumer and count")
    func pendingDeliveries() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
        for id in ["1-1", "2-1", "3-1"] { _ = try connection.command("XADD", "siwa:deletions", id, "type", "x") }
        _ = try connection.command("XGROUP", "CREATE", "siwa:deletions", "g", "0")
        _ = try connection.command("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "siwa:deletions", ">")
        _ = try connection.command("XCLAIM", "siwa:deletions", "g", "c2", "0", "2-1")
        _ = try connection.command("XACK", "siwa:deletions", "g", "1-1")
        let reader = StoreReader(connection: connection)
        let pending = try reader.pendingDeliveries(of: "siwa:deletions", group: "g", limit: 10)
        #expect(pending.map { "\($0.id) \($0.consumer ?? "-") \($0.deliveries)" } == ["2-1 c2 2"])
        _ = try connection.command("XACK", "siwa:deletions", "g", "2-1")
        #expect(try reader.pendingDeliveries(of: "siwa:deletions", group: "g", limit: 10).isEmpty)
    }

    @Test("a subscription: what is published on the channel arrives on the subscribed connection")
    func subscription() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let endpoint = try RedisEndpoint(parsing: server.url())
        let subscriber = RedisConnection(endpoint: endpoint)
        try StoreReader(connection: subscriber).subscribe("siwa:notifications")
        let publisher = RedisConnection(endpoint: endpoint)
        #expect(try publisher.command("PUBLISH", "siwa:notifications", "{\"jti\":\"j1\"}").integer == 1)
        let message = try subscriber.nextPushedReply().array?.compactMap(\.string)
        #expect(message == ["message", "siwa:notifications", "{\"jti\":\"j1\"}"])
    }
}
