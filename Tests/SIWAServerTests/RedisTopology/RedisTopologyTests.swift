import SIWARedis
import SIWASettingKeys
import SIWASettings
import Testing

/// The pieces of the Redis topology that need no server: the topology read from the
/// settings, one sentinel's reply read, and a cluster node's `CLUSTER SLOTS` read.
@Suite("Redis topology: read once, replies parsed without a server")
struct RedisTopologyTests {
    static let base = ["SIWA_CLIENT_IDS": "com.example.app"]

    static func topology(_ extra: [String: String]) throws -> RedisTopology {
        try ServerConfiguration(environment: base.merging(extra) { _, new in new }).redis.topology
    }

    @Test("one value from the settings: single, Sentinel with its settings, Cluster with its seeds")
    func topologyFromSettings() throws {
        #expect(try Self.topology([:]) == .single)
        #expect(
            try Self.topology(["SIWA_REDIS_SENTINELS": "10.0.0.1:26379", "SIWA_REDIS_SENTINEL_MASTER": "m"])
                == .sentinel(
                    RedisTopology.Sentinel(
                        sentinels: [RedisNodeAddress(host: "10.0.0.1", port: 26379)], masterName: "m", password: nil)))
        #expect(
            try Self.topology(["SIWA_REDIS_CLUSTER_NODES": "10.0.0.1:7000,[::1]:7001", "SIWA_KEY_PREFIX": "{siwa}"])
                == .cluster(seeds: [RedisNodeAddress(host: "10.0.0.1", port: 7000), .init(host: "::1", port: 7001)]))
    }

    @Test("Sentinel and Cluster both set: refused, naming the cluster setting")
    func contradictionRefused() {
        #expect {
            _ = try Self.topology([
                "SIWA_REDIS_CLUSTER_NODES": "10.0.0.1:7000", "SIWA_KEY_PREFIX": "{siwa}",
                "SIWA_REDIS_SENTINELS": "10.0.0.1:26379", "SIWA_REDIS_SENTINEL_MASTER": "m",
            ])
        } throws: { error in
            (error as? ConfigurationError)?.setting == "SIWA_REDIS_CLUSTER_NODES"
                && (error as? ConfigurationError)?.description.contains("both set: choose one") == true
        }
    }

    static let sentinel = RedisNodeAddress(host: "10.0.0.1", port: 26379)

    static func fields(_ pairs: [(String, String)]) -> RedisReply {
        .array(pairs.flatMap { [RedisReply.bulkString(Array($0.0.utf8)), .bulkString(Array($0.1.utf8))] })
    }

    @Test("one sentinel's reply: an answer the tally weighs, no such master, or a failure worded by kind")
    func oneSentinelReply() {
        let full = Self.fields([
            ("name", "m"), ("ip", "10.0.1.1"), ("port", "6379"), ("flags", "master,s_down"), ("config-epoch", "7"),
            ("quorum", "2"),
        ])
        guard case .answered(let answer) = SentinelTally.Reply(.success(full), from: Self.sentinel) else {
            Issue.record("a full SENTINEL MASTER reply was not read as an answer")
            return
        }
        #expect(answer.primary == RedisNodeAddress(host: "10.0.1.1", port: 6379))
        #expect(answer.configEpoch == 7)
        #expect(answer.flags == ["master", "s_down"])
        #expect(answer.quorum == 2)
        let noEpoch = Self.fields([("ip", "10.0.1.1"), ("port", "6379"), ("flags", "master")])
        guard case .unknownMaster = SentinelTally.Reply(.success(noEpoch), from: Self.sentinel) else {
            Issue.record("a reply without config-epoch was used")
            return
        }
        let noSuchMaster = RedisError(.serverError, "ERR No such master with that name")
        guard case .unknownMaster = SentinelTally.Reply(.failure(noSuchMaster), from: Self.sentinel) else {
            Issue.record("'No such master' was not read as an unknown master")
            return
        }

        var round = SentinelTally.Round()
        round.record(.unknownMaster, from: Self.sentinel)
        #expect(round.noAnswerError(masterName: "m").code == .sentinelUnknownMaster)
        round.record(
            SentinelTally.Reply(
                .failure(RedisError(.serverError, "NOAUTH Authentication required.")), from: Self.sentinel),
            from: Self.sentinel)
        #expect(round.noAnswerError(masterName: "m").code == .sentinelLoginRefused)
        #expect(round.noAnswerError(masterName: "m").field == .sentinelPassword)

        var outage = SentinelTally.Round()
        let lost = RedisError(.connectionFailed, "AUTH or SELECT failed: lost the connection")
        outage.record(SentinelTally.Reply(.failure(lost), from: Self.sentinel), from: Self.sentinel)
        #expect(outage.noAnswerError(masterName: "m").code == .sentinelUnreachable)
        var refused = SentinelTally.Round()
        let wrongPassword = RedisError(
            .connectionFailed, "AUTH or SELECT failed",
            cause: .loginRefused(RedisError(.serverError, "WRONGPASS invalid username-password pair")))
        refused.record(.failed(wrongPassword), from: Self.sentinel)
        #expect(refused.noAnswerError(masterName: "m").code == .sentinelLoginRefused)
    }

    static func node(_ host: RedisReply, _ port: Int64) -> RedisReply {
        .array([host, .integer(port), .bulkString(Array("id".utf8))])
    }

    static func text(_ value: String) -> RedisReply { .bulkString(Array(value.utf8)) }

    @Test(
        "CLUSTER SLOTS: NULL or empty host is the node asked, `?` names no node, a range without a usable primary is skipped"
    )
    func clusterSlots() {
        let reply = RedisReply.array([
            .array([.integer(0), .integer(5460), Self.node(Self.text("10.0.0.1"), 7000), Self.node(.null, 7003)]),
            .array([.integer(5461), .integer(10922), Self.node(Self.text(""), 7001), Self.node(Self.text("?"), 7004)]),
            .array([.integer(10923), .integer(16383), Self.node(Self.text("?"), 7002), Self.node(Self.text("h"), 7005)]
            ),
            .array([.integer(9), .integer(1), Self.node(Self.text("bad-range"), 7006)]),
            .array([.integer(0), .integer(1), Self.node(Self.text("bad-port"), 0)]),
        ])
        let ranges = RedisClusterLocator.slotRanges(reply, askedHost: "asked")
        #expect(ranges.map(\.slots) == [0...5460, 5461...10922])
        #expect(ranges.map(\.primary) == [.init(host: "10.0.0.1", port: 7000), .init(host: "asked", port: 7001)])
        #expect(ranges[0].nodes == [.init(host: "10.0.0.1", port: 7000), .init(host: "asked", port: 7003)])
        #expect(ranges[1].nodes == [.init(host: "asked", port: 7001)])
        #expect(RedisClusterLocator.slotRanges(.status("OK"), askedHost: "asked").isEmpty)
    }

    @Test("a node list is parsed for its own setting: the cluster's error names the cluster's field")
    func nodeLists() throws {
        #expect(
            try RedisNodeAddress.list(parsing: " a.example:7000 , [::1]:7001", field: .clusterNodes).get() == [
                .init(host: "a.example", port: 7000), .init(host: "::1", port: 7001),
            ])
        guard case .failure(let empty) = RedisNodeAddress.list(parsing: ",", field: .clusterNodes) else {
            Issue.record("an empty node list was accepted")
            return
        }
        #expect(empty.field == .clusterNodes)
        #expect(empty.message.hasPrefix("names no node"))
    }
}
