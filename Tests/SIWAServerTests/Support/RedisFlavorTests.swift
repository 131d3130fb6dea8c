import Foundation
import Testing

/// The suites' Valkey pass (`SIWA_TEST_REDIS_SERVER=valkey`) runs against Valkey indeed:
/// the server the test support starts names itself in `INFO server`.
@Suite("The Redis server under test")
struct RedisFlavorTests {
    @Test("the server started is the one asked for (redis_version only, or valkey_version)")
    func serverIsTheOneAskedFor() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let info = try server.unixSocketConnection().command("INFO", "server").string ?? ""
        #expect(info.contains("redis_version:"))
        #expect(info.contains("valkey_version:") == (RedisFlavor.underTest == .valkey), "\(info.prefix(300))")
    }
}
