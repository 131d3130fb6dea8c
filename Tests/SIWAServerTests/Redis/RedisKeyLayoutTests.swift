import SIWAServer
import Testing

/// The contract's key names, spelled by `RedisKeyLayout` alone (the README's contract
/// section and the readers in examples/ use these names).
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
}
