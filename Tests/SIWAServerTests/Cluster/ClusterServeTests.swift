import Foundation
import SIWARedis
import SIWASettingKeys
import Testing

/// The real `serve` against a real Redis Cluster on loopback (3 primaries, 3 replicas).
@Suite("Redis Cluster: serve", .serialized)
struct ClusterServeTests {
    /// serve's settings for `cluster`: its seed nodes, the `{siwa}` prefix, and for a TLS-only
    /// cluster `rediss://`, the CA, and `localhost`, the name the nodes' certificate holds.
    static func environment(_ cluster: RedisClusterNodes, seeds: String? = nil) -> [String: String] {
        var environment = [
            "SIWA_REDIS_CLUSTER_NODES": seeds ?? cluster.nodeList, "SIWA_KEY_PREFIX": RedisClusterNodes.keyPrefix,
            "SIWA_REDIS_URL": "redis://127.0.0.1:1",
        ]
        if let authority = cluster.tls {
            environment["SIWA_REDIS_URL"] = "rediss://127.0.0.1:1"
            environment["SIWA_REDIS_TLS_CA_FILE"] = authority.caCertificatePath
            environment["SIWA_REDIS_TLS_SERVER_NAME"] = "localhost"
        }
        return environment
    }

    @Test("a seed list naming a dead node first: notifications applied on the slot's primary, keys in one slot")
    func appliedWithDeadSeedFirst() throws {
        let cluster = try RedisClusterNodes()
        defer { cluster.shutdown() }
        let deadPort = try LoopbackPort.free()
        let stack = try ServeStack(
            extraEnvironment: Self.environment(cluster, seeds: "127.0.0.1:\(deadPort)," + cluster.nodeList),
            inProcess: true)
        defer { stack.shutdown() }

        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.cluster.1"))
        #expect(response.status == 200)
        #expect(response.jsonFields["status"] == "applied")
        let owner = try cluster.ownerConnection()
        let hash = try owner.command("HGETALL", "{siwa}:user:{\(ServeStack.clientID):001.cluster.1}").fieldMap
        #expect(hash?["last_event_type"] == "consent-revoked")
        #expect(try owner.command("XLEN", "{siwa}:events").integer == 1)
        // The endpoint's slot arithmetic agrees with Redis's for every key of the contract.
        let keys = [
            "{siwa}:user:{\(ServeStack.clientID):001.cluster.1}",
            "{siwa}:seen:{\(ServeStack.clientID):001.cluster.1}:j",
            "{siwa}:events", "{siwa}:notifications", "{siwa}:reconciled:{c:s}", "siwa:user:{c:s}", "plain", "{}x",
        ]
        for key in keys {
            let slot = try owner.command("CLUSTER", "KEYSLOT", key).integer
            #expect(slot == Int64(RedisClusterLocator.hashSlot(of: Array(key.utf8))), "\(key)")
        }
        #expect(Set(keys.prefix(5).map { RedisClusterLocator.hashSlot(of: Array($0.utf8)) }).count == 1)
        // Every node of the cluster is the server under test (Valkey in scripts/test's Valkey pass).
        for node in cluster.nodes {
            let info = try cluster.connection(port: node.port).command("INFO", "server").string ?? ""
            #expect(info.contains("valkey_version:") == (RedisFlavor.underTest == .valkey), "\(info.prefix(200))")
        }
        // Nothing went outside the prefix (the test Redis of the stack is untouched too).
        #expect(try stack.redisSnapshot() == [])
    }

    @Test("cluster mode with a key prefix that is not a hash tag: refused at start, naming SIWA_KEY_PREFIX")
    func prefixWithoutHashTagRefused() throws {
        let stack = try ServeStack(
            extraEnvironment: [
                "SIWA_REDIS_CLUSTER_NODES": "127.0.0.1:7000", "SIWA_KEY_PREFIX": "siwa",
            ], startingServe: false)
        defer { stack.shutdown() }
        let run = try CommandRun.endpoint(["serve", "--check"], environment: stack.environment)
        #expect(run.status == 2)
        #expect(run.errors.contains("SIWA_KEY_PREFIX"), "\(run.errors)")
        #expect(run.errors.contains("hash tag"))
    }

    @Test(
        "cluster mode beside Sentinel, with a database other than 0, or with a malformed hash-tag prefix: refused at start, naming the setting"
    )
    func conflictingSettingsRefused() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let cases: [(extra: [String: String], setting: String)] = [
            (
                [
                    "SIWA_REDIS_CLUSTER_NODES": "127.0.0.1:7000", "SIWA_KEY_PREFIX": "{siwa}",
                    "SIWA_REDIS_SENTINELS": "127.0.0.1:26379", "SIWA_REDIS_SENTINEL_MASTER": "siwa",
                ], "SIWA_REDIS_CLUSTER_NODES"
            ),
            (
                [
                    "SIWA_REDIS_CLUSTER_NODES": "127.0.0.1:7000", "SIWA_KEY_PREFIX": "{siwa}",
                    "SIWA_REDIS_URL": "redis://127.0.0.1:7000/3",
                ], "SIWA_REDIS_URL"
            ),
            (["SIWA_REDIS_CLUSTER_NODES": "127.0.0.1:7000", "SIWA_KEY_PREFIX": "{}siwa"], "SIWA_KEY_PREFIX"),
            (["SIWA_REDIS_CLUSTER_NODES": "127.0.0.1:7000", "SIWA_KEY_PREFIX": "{siwa"], "SIWA_KEY_PREFIX"),
            (["SIWA_KEY_PREFIX": "{si wa}"], "SIWA_KEY_PREFIX"),
        ]
        for (extra, setting) in cases {
            let run = try CommandRun.endpoint(
                ["serve", "--check"], environment: stack.environment.merging(extra) { _, new in new })
            #expect(run.status == 2)
            #expect(run.errors.contains(setting), "\(run.errors)")
        }
    }

    @Test(
        "cluster nodes that are not in cluster mode: serve refuses to start (exit 2, naming SIWA_REDIS_CLUSTER_NODES)")
    func notAClusterRefused() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        var environment = stack.environment
        environment["SIWA_REDIS_CLUSTER_NODES"] = "127.0.0.1:\(stack.redis.port)"
        environment["SIWA_KEY_PREFIX"] = "{siwa}"
        let run = try CommandRun.endpoint(["serve"], environment: environment, timeout: .seconds(60))
        #expect(run.status == 2)
        #expect(run.errors.contains("SIWA_REDIS_CLUSTER_NODES"), "\(run.errors)")
        #expect(run.errors.contains("not in cluster mode"))
        #expect(try stack.redisSnapshot() == [])
    }

    @Test(
        "a TLS-only cluster (--tls-cluster yes): the slot's primary found and the notification applied over TLS; its certificates refused (a CA file that signed no node, a server name no certificate holds): serve --check exit 3 naming redis_tls_refused, the reason and the setting; serve starts, spools, /healthz 503 naming it"
    )
    func appliedOverTLS() throws {
        let cluster = try RedisClusterNodes(transport: .tls)
        defer { cluster.shutdown() }
        #expect(cluster.tls != nil)
        // The same cluster, refused (one cluster for both: the suite is slow enough).
        try Self.checkRefusedCertificates(cluster)
        let stack = try ServeStack(extraEnvironment: Self.environment(cluster), inProcess: true)
        defer { stack.shutdown() }

        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.cluster.tls"))
        #expect(response.status == 200)
        #expect(response.jsonFields["status"] == "applied")
        let owner = try cluster.ownerConnection()
        let hash = try owner.command("HGETALL", "{siwa}:user:{\(ServeStack.clientID):001.cluster.tls}").fieldMap
        #expect(hash?["last_event_type"] == "consent-revoked")
        #expect(try owner.command("XLEN", "{siwa}:events").integer == 1)
        let health = try stack.health().jsonFields
        #expect(health["redis_primary"] == "127.0.0.1:\(try #require(cluster.slotOwnerPort()))")
    }

    /// With `cluster`'s certificates refused (a CA file that signed no node; a server name no
    /// certificate holds): serve --check exit 3 naming redis_tls_refused, the reason, the
    /// setting and the certificate hint; serve starts, spools, /healthz 503 naming it.
    static func checkRefusedCertificates(_ cluster: RedisClusterNodes) throws {
        let otherDirectory = cluster.directory.appendingPathComponent("other-ca")
        try FileManager.default.createDirectory(at: otherDirectory, withIntermediateDirectories: true)
        let other = try TestCertificateAuthority(in: otherDirectory)
        let cases: [(name: String, extra: [String: String], reason: String, setting: String)] = [
            (
                "a CA file that signed no node", ["SIWA_REDIS_TLS_CA_FILE": other.caCertificatePath],
                "self-signed certificate in certificate chain", "SIWA_REDIS_TLS_CA_FILE"
            ),
            (
                "a server name no certificate holds", ["SIWA_REDIS_TLS_SERVER_NAME": "redis.other.example"],
                "hostname mismatch", "SIWA_REDIS_TLS_SERVER_NAME"
            ),
        ]
        for (index, refused) in cases.enumerated() {
            let environment = Self.environment(cluster).merging(refused.extra) { _, new in new }
            let stack = try ServeStack(extraEnvironment: environment, startingServe: false, inProcess: true)
            defer { stack.shutdown() }
            let check = try CommandRun.endpoint(["serve", "--check"], environment: stack.environment)
            #expect(check.status == 3, "\(refused.name): \(check.errors)")
            let lines = check.errors.split(separator: "\n").map(String.init)
            #expect(lines.count == 1, "\(refused.name): \(check.errors)")
            let line = lines.first ?? ""
            #expect(line.contains(#""event":"redis_tls_refused""#), "\(refused.name): \(line)")
            #expect(line.contains(#""reason":"\#(refused.reason)""#), "\(refused.name): \(line)")
            #expect(line.contains(#""setting":"\#(refused.setting)""#), "\(refused.name): \(line)")
            // The certificate hint kept through the cluster path: what it must satisfy, in settings.
            #expect(line.contains("the server's certificate must chain to"), "\(refused.name): \(line)")
            guard index == 0 else { continue }
            try stack.startServe()
            let answer = try stack.post(try stack.body(type: "consent-revoked", sub: "001.cluster.tls.refused"))
            #expect(answer.status == 200 && answer.jsonFields["status"] == "spooled", "\(answer.bodyText)")
            let health = try stack.health()
            #expect(health.status == 503)
            #expect(health.jsonFields["redis_tls_refused"]?.contains(refused.reason) == true, "\(health.bodyText)")
            #expect(try cluster.ownerConnection().command("DBSIZE").integer == 0)
        }
    }

    /// Calls of one command on a node (`INFO commandstats`), 0 when never called.
    static func calls(_ command: String, on connection: RedisConnection) throws -> Int {
        let stats = try connection.command("INFO", "commandstats").string ?? ""
        let prefix = "cmdstat_\(command):calls="
        guard let line = stats.split(whereSeparator: \.isNewline).first(where: { $0.hasPrefix(prefix) }) else {
            return 0
        }
        return Int(line.dropFirst(prefix.count).prefix { $0.isNumber }) ?? 0
    }

    @Test(
        "while the slot moves (every new notification TRYAGAIN): each spooled, the replayer paced to a pass a second however many requests nudge it, and every one applied once the slot has moved"
    )
    func replayPacedWhileTheSlotMoves() throws {
        let cluster = try RedisClusterNodes()
        defer { cluster.shutdown() }
        let stack = try ServeStack(extraEnvironment: Self.environment(cluster), inProcess: true)
        defer { stack.shutdown() }
        // A first notification: the contract's keys exist, the slot has keys to move.
        #expect(
            try stack.post(try stack.body(type: "consent-revoked", sub: "001.pace.0")).jsonFields["status"]
                == "applied")
        let source = try #require(cluster.slotOwnerPort())
        let target = try #require(cluster.nodes.map(\.port).first { $0 != source && cluster.role(of: $0) == "master" })
        // The slot half-moved, every key on the target: a new notification runs nowhere (TRYAGAIN).
        let slot = String(RedisClusterNodes.slot)
        let sourceConnection = cluster.connection(port: source)
        let targetConnection = cluster.connection(port: target)
        _ = try targetConnection.command("CLUSTER", "SETSLOT", slot, "IMPORTING", try cluster.nodeID(port: source))
        _ = try sourceConnection.command("CLUSTER", "SETSLOT", slot, "MIGRATING", try cluster.nodeID(port: target))
        let keys = (try sourceConnection.command("CLUSTER", "GETKEYSINSLOT", slot, "100").array ?? []).compactMap(
            \.string)
        #expect(
            try sourceConnection.command(["MIGRATE", "127.0.0.1", String(target), "", "0", "5000", "KEYS"] + keys)
                .string == "OK")

        let askedBefore = try Self.calls("asking", on: targetConnection)
        let posts = 20
        let started = ContinuousClock.now
        for index in 1...posts {
            let response = try stack.post(try stack.body(type: "consent-revoked", sub: "001.pace.\(index)"))
            #expect(response.status == 200 && response.jsonFields["status"] == "spooled", "\(index)")
        }
        let seconds = Int((ContinuousClock.now - started) / .seconds(1))
        // Each request followed one ASK to the target; the replayer's passes (each an ASK
        // answered TRYAGAIN) at most one a second, not one per request that nudged it.
        let asked = try Self.calls("asking", on: targetConnection) - askedBefore
        #expect(asked >= posts)
        #expect(asked - posts <= seconds + 2, "\(asked - posts) replay passes in \(seconds) s")
        // A pass met TRYAGAIN (the asks beyond the posts'): a slot being moved is not a refusal
        // about the deployment, so /healthz stays 200 (a balancer keeps the node) while the
        // spool holds what waits.
        try cluster.waitUntil(timeout: 20) {
            ((try? Self.calls("asking", on: targetConnection)) ?? 0) > asked + askedBefore
        }
        let health = try stack.health()
        #expect(health.status == 200, "\(health.jsonFields)")

        // The slot given to the target: the spool drains, every notification once in the stream.
        let targetID = try cluster.nodeID(port: target)
        _ = try targetConnection.command("CLUSTER", "SETSLOT", slot, "NODE", targetID)
        _ = try sourceConnection.command("CLUSTER", "SETSLOT", slot, "NODE", targetID)
        try cluster.waitUntil(timeout: 60) {
            (try? targetConnection.command("XLEN", "{siwa}:events").integer) == Int64(posts + 1)
        }
    }
}
