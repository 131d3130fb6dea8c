import Foundation
import SIWARedis
import SIWASettingKeys
import SIWASettings
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
        guard case .failure(let sentinels) = RedisNodeAddress.list(parsing: "127.0.0.1", field: .sentinels) else {
            Issue.record("a sentinel without a port was accepted")
            return
        }
        #expect(sentinels.field == .sentinels)
        #expect(!sentinels.message.contains("SIWA_"), "\(sentinels.message)")
        guard case .failure(let nodes) = RedisNodeAddress.list(parsing: "127.0.0.1:0", field: .clusterNodes) else {
            Issue.record("a cluster node with port 0 was accepted")
            return
        }
        #expect(nodes.field == .clusterNodes)
        #expect(!nodes.message.contains("SIWA_"), "\(nodes.message)")
    }

    @Test("SIWARedis's sources spell no setting name: every `SIWA_` word is the application's")
    func noSettingNameInTheRedisModule() throws {
        let module = SettingsDocumentationTests.repository.appendingPathComponent("Sources/SIWARedis")
        let files = try FileManager.default.contentsOfDirectory(atPath: module.path).filter { $0.hasSuffix(".swift") }
        #expect(files.count >= 5, "\(files)")
        for file in files {
            let text = try String(contentsOf: module.appendingPathComponent(file), encoding: .utf8)
            #expect(!text.contains("SIWA_"), "\(file) names a setting")
        }
    }

    @Test("a refused server certificate: the application words the hint from its fields, with the settings")
    func certificateRefusalIsWordedByTheApplication() {
        let byURL = RedisError(
            .tlsRefused, "could not connect to localhost:6379: TLS: certificate verify failed",
            certificateRefusal: .init(trust: nil, serverName: "localhost", nameSource: .url))
        #expect(!byURL.message.contains("SIWA_"))
        #expect(
            byURL.operatorMessage
                == "could not connect to localhost:6379: TLS: certificate verify failed (the server's certificate "
                + "must chain to the system trust store, be valid now and name 'localhost', the host of SIWA_REDIS_URL)"
        )
        let byName = RedisError(
            .tlsRefused, "TLS to the sentinels was refused (...)", field: .sentinelTLS,
            certificateRefusal: .init(trust: .tlsCAFile, serverName: "redis.internal", nameSource: .tlsServerName))
        #expect(
            byName.operatorMessage
                == "SIWA_REDIS_SENTINEL_TLS: TLS to the sentinels was refused (...) (the server's certificate must "
                + "chain to SIWA_REDIS_TLS_CA_FILE, be valid now and name 'redis.internal', SIWA_REDIS_TLS_SERVER_NAME)"
        )
        #expect(RedisError.Field.tlsServerName.setting == "SIWA_REDIS_TLS_SERVER_NAME")
    }
}
