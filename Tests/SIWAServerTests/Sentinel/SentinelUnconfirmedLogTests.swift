import Foundation
import SIWARedis
import SIWATestSupport
import Testing

/// Through an outage of the primary, every discovery (each probe of the breaker) asks the
/// sentinels again and finds the address they name unreachable: serve logs that once, not
/// once per discovery. A real sentinel monitoring a port nothing listens on (it names that
/// address for as long as it runs), the real serve probing every 100 ms.
@Suite("Redis Sentinel: an unreachable primary is logged once through an outage", .serialized)
struct SentinelUnconfirmedLogTests {
    @Test("serve: many discoveries naming an unreachable primary, one redis_primary_unconfirmed line")
    func unconfirmedPrimaryIsLoggedOnce() throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("siwa-unconfirmed-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let deadPort = try LoopbackPort.free()
        let sentinelPort = try LoopbackPort.free()
        let configuration = directory.appendingPathComponent("sentinel.conf").path
        try """
        port \(sentinelPort)
        bind 127.0.0.1
        dir \(directory.path)
        logfile \(directory.path)/sentinel.log
        sentinel monitor \(RedisSentinelCluster.masterName) 127.0.0.1 \(deadPort) 2
        sentinel down-after-milliseconds \(RedisSentinelCluster.masterName) 60000

        """.write(toFile: configuration, atomically: true, encoding: .utf8)
        let sentinel = RedisSentinelCluster.Node(
            port: sentinelPort, arguments: [configuration, "--sentinel"],
            logPath: directory.path + "/sentinel.log", flavor: .underTest)
        try sentinel.start()
        defer { sentinel.kill() }
        #expect(
            waitUntil(timeout: 20) {
                (try? RedisConnection(
                    endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: sentinelPort)),
                    connectTimeout: .seconds(1), commandTimeout: .seconds(1)
                ).command("PING").string) == "PONG"
            })

        let stack = try ServeStack(extraEnvironment: [
            "SIWA_REDIS_SENTINELS": "127.0.0.1:\(sentinelPort)",
            "SIWA_REDIS_SENTINEL_MASTER": RedisSentinelCluster.masterName,
            "SIWA_REDIS_RETRY_MS": "100",
        ])
        defer { stack.shutdown() }
        let serve = try #require(stack.serve)

        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.unconfirmed.a"))
        #expect(response.status == 200)
        #expect(response.jsonFields["status"] == "spooled")
        // At least 20 discoveries, each naming the unreachable address (a probe every 100 ms).
        let discovered = try stack.waitUntil(timeout: 60) {
            let metrics = String(decoding: try stack.request("GET", "/metrics").body, as: UTF8.self)
            let line = metrics.split(separator: "\n").first { $0.hasPrefix("siwa_redis_sentinel_discoveries_total ") }
            return (line?.split(separator: " ").last.flatMap { Int($0) } ?? 0) >= 20
        }
        #expect(discovered)
        let lines = serve.logLines(event: "redis_primary_unconfirmed")
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first?.contains(#""named":"127.0.0.1:\#(deadPort)""#) == true, "\(lines)")
        #expect(lines.first?.contains(#""repeats""#) == false, "\(lines)")
    }
}
