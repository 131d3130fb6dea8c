import SIWARedis
import SIWAStore
import Testing

/// The contract's key names, spelled by `RedisKeyLayout` alone (docs/contract.md and the
/// readers in examples/ use these names).
@Suite("Redis key layout")
struct RedisKeyLayoutTests {
    @Test("every key and channel of the contract, under the prefix")
    func names() {
        let keys = RedisKeyLayout(prefix: "app1")
        #expect(keys.user(clientID: "com.example.app", subject: "001.a.2") == "app1:user:{com.example.app:001.a.2}")
        #expect(
            keys.seen(clientID: "com.example.app", subject: "001.a.2", tokenID: "jti-1")
                == "app1:seen:{com.example.app:001.a.2}:jti-1")
        #expect(
            keys.reconciled(clientID: "com.example.app", subject: "001.a.2")
                == "app1:reconciled:{com.example.app:001.a.2}")
        #expect(keys.events == "app1:events")
        #expect(keys.deletions == "app1:deletions")
        #expect(keys.notifications == "app1:notifications")
        #expect(keys.replicationProbe == "app1:replication-probe")
        #expect(RedisKeyLayout().events == "siwa:events")
    }

    @Test("the app transfer keys: their names, and with a hash-tag prefix the one slot of every other key")
    func transferKeys() {
        let keys = RedisKeyLayout(prefix: "siwa")
        #expect(keys.transferWindow(clientID: "com.example.app") == "siwa:transfer:{com.example.app}")
        #expect(
            keys.transferPending(clientID: "com.example.app", direction: "import")
                == "siwa:transfer-pending:{com.example.app}:import")
        #expect(
            keys.transferFrom(clientID: "com.example.app", subject: "001.a.2")
                == "siwa:transfer-from:{com.example.app:001.a.2}")
        #expect(
            keys.transferID(clientID: "com.example.app", transferSubject: "tr.9")
                == "siwa:transfer-id:{com.example.app:tr.9}")
        // Redis Cluster: a script's keys must share a slot; with the prefix {siwa} they all do.
        let cluster = RedisKeyLayout(prefix: "{siwa}")
        let slot = RedisClusterLocator.hashSlot(of: Array("{siwa}".utf8))
        let transferKeys = [
            cluster.transferWindow(clientID: "com.example.app"),
            cluster.transferPending(clientID: "com.example.app", direction: "export"),
            cluster.transferFrom(clientID: "com.example.app", subject: "001.a.2"),
            cluster.transferID(clientID: "com.example.app", transferSubject: "tr.9"),
            cluster.user(clientID: "com.example.app", subject: "001.new.3"), cluster.deletions,
        ]
        #expect(
            transferKeys.map { RedisClusterLocator.hashSlot(of: Array($0.utf8)) } == Array(repeating: slot, count: 6))
    }
}
