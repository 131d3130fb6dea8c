import Foundation
import SIWARedis
import Testing

/// `siwa-endpoint bench --redis-call`, the Redis part of serve's floor in scripts/bench-e2e:
/// what it writes and where. Its figures are printed, never asserted.
struct BenchRedisCallTests {
    @Test("every call applied, under its own prefix only: the contract's keys stay untouched")
    func writesUnderItsOwnPrefixOnly() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let redis = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
        _ = try redis.command("SET", "siwa:user:{com.example.app:kept}", "untouched")

        let run = try CommandRun.endpoint(
            ["bench", "--redis-call", "--redis-url", server.url(), "--calls", "8", "--rounds", "2"])
        #expect(run.status == 0, "\(run.errors)")
        #expect(run.lines.contains { $0.hasPrefix("Redis script call CPU time: ") && $0.contains(" us each") })

        // One warm-up call and 2 rounds of 8, each a user of its own, every one applied:
        // 17 user hashes, 17 seen markers, 17 stream entries, the 4 account-deleted in each
        // round and the warm-up's email-disabled not among the deletions.
        let keys = try redis.command("KEYS", "*").array?.compactMap(\.string).sorted() ?? []
        #expect(keys.filter { $0.hasPrefix("siwa-bench-call:user:") }.count == 17)
        #expect(keys.filter { $0.hasPrefix("siwa-bench-call:seen:") }.count == 17)
        #expect(try redis.command("XLEN", "siwa-bench-call:events").integer == 17)
        #expect(try redis.command("XLEN", "siwa-bench-call:deletions").integer == 4)
        #expect(
            keys.filter { !$0.hasPrefix("siwa-bench-call:") } == ["siwa:user:{com.example.app:kept}"],
            "\(keys)")
        #expect(try redis.command("GET", "siwa:user:{com.example.app:kept}").string == "untouched")
    }

    @Test("without --redis-url: a usage error, nothing written")
    func needsAURL() throws {
        let run = try CommandRun.endpoint(["bench", "--redis-call"])
        #expect(run.status == 2, "\(run.output) \(run.errors)")
        #expect(run.errors.contains("--redis-url is required"))
    }
}
