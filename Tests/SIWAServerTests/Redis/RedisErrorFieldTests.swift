import SIWARedis
import SIWAServer
import Testing

/// SIWARedis says which configured thing failed (`RedisError.Field`); the application maps
/// it to the setting to name.
@Suite("Redis errors carry the field they are about")
struct RedisErrorFieldTests {
    @Test("every field names a setting of the table")
    func everyFieldNamesASetting() {
        let names = Set(ServerConfiguration.settings.map(\.name))
        for field in RedisError.Field.allCases {
            #expect(names.contains(field.setting), "\(field) -> \(field.setting)")
        }
        #expect(RedisError.Field.sentinelMasterName.setting == "SIWA_REDIS_SENTINEL_MASTER")
        #expect(RedisError.Field.url.setting == "SIWA_REDIS_URL")
    }

    @Test("a bad list of sentinels or cluster nodes is refused with its field, the message naming no setting")
    func listsCarryTheirField() throws {
        guard case .failure(let sentinels) = RedisPrimaryLocator.parseSentinels("127.0.0.1") else {
            Issue.record("a sentinel without a port was accepted")
            return
        }
        #expect(sentinels.field == .sentinels)
        #expect(!sentinels.message.contains("SIWA_"), "\(sentinels.message)")
        guard case .failure(let nodes) = RedisClusterLocator.parseNodes("127.0.0.1:0") else {
            Issue.record("a cluster node with port 0 was accepted")
            return
        }
        #expect(nodes.field == .clusterNodes)
        #expect(!nodes.message.contains("SIWA_"), "\(nodes.message)")
    }
}
