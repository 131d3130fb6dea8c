import Foundation
import SIWASettingKeys
import Synchronization
import Testing

@testable import SIWAResponder
@testable import SIWASettings
@testable import SIWASpool

/// The readiness rule and its limits' settings, owned by `ReadinessLimits`.
@Suite("Readiness rule and its settings")
struct ReadinessTests {
    static let minimal = ["SIWA_CLIENT_IDS": "com.example.app"]

    static func observation(
        keys: Int = 1, redis: Bool = true, spoolWritable: Bool? = nil, depth: Int = 0, age: Duration? = nil
    ) -> Readiness.Observation {
        .init(
            signingKeys: keys, redisAnswers: redis, spoolWritable: spoolWritable, spoolDepth: depth,
            oldestRecordAge: age)
    }

    @Test(
        "each condition alone, as the rule names it",
        arguments: [
            (observation(), []),
            (observation(redis: false, spoolWritable: true), []),
            (observation(redis: true, spoolWritable: false), []),
            (observation(redis: false, spoolWritable: false), ["redis_unreachable", "spool_unwritable"]),
            (observation(keys: 0), ["no_signing_keys"]),
            (observation(depth: 10), []),
            (observation(depth: 11), ["spool_too_deep"]),
            (observation(depth: 1, age: .seconds(60)), []),
            (observation(depth: 1, age: .milliseconds(60_001)), ["spool_too_old"]),
        ] as [(Readiness.Observation, [String])])
    func rule(observed: Readiness.Observation, reasons: [String]) {
        let readiness = Readiness(
            observed, limits: ReadinessLimits(spoolMaximumDepth: 10, spoolMaximumAge: .seconds(60)))
        #expect(readiness.reasons.map(\.rawValue) == reasons)
        #expect(readiness.isReady == reasons.isEmpty)
    }

    @Test("a limit of 0 is no limit")
    func zeroIsNoLimit() {
        let readiness = Readiness(
            Self.observation(depth: 1_000_000_000, age: .seconds(1_000_000)),
            limits: ReadinessLimits(spoolMaximumDepth: 0, spoolMaximumAge: .zero))
        #expect(readiness.isReady)
    }

    @Test("the table's defaults are the component's, and a configuration from no settings holds them")
    func defaultsAreTheComponents() throws {
        let rows = ServerConfiguration.settings
        #expect(
            rows.first { $0.name == "SIWA_READY_SPOOL_MAX_DEPTH" }?.defaultValue
                == "\(ReadinessLimits().spoolMaximumDepth)")
        #expect(
            rows.first { $0.name == "SIWA_READY_SPOOL_MAX_AGE_SECONDS" }?.defaultValue
                == "\(Int(ReadinessLimits().spoolMaximumAge / .seconds(1)))")
        #expect(try ServerConfiguration(environment: Self.minimal).readiness == ReadinessLimits())
    }

    @Test(
        "a value the table accepts the component accepts; the next one out is refused by both, naming it",
        arguments: [
            ("SIWA_READY_SPOOL_MAX_DEPTH", 0, 100_000_000), ("SIWA_READY_SPOOL_MAX_AGE_SECONDS", 0, 2_592_000),
            ("SIWA_HEALTH_PING_TIMEOUT_MS", 10, 2000),
        ])
    func boundsAreTheComponents(name: String, lowest: Int, highest: Int) throws {
        for value in [lowest, highest] {
            let configuration = try ServerConfiguration(environment: Self.minimal.merging([name: "\(value)"]) { $1 })
            #expect(throws: Never.self) { try configuration.readiness.validate() }
        }
        for value in [lowest - 1, highest + 1] {
            #expect {
                try ServerConfiguration(environment: Self.minimal.merging([name: "\(value)"]) { $1 })
            } throws: { error in
                (error as? ConfigurationError)?.setting == name
            }
        }
        var outside = ReadinessLimits()
        switch name {
        case "SIWA_READY_SPOOL_MAX_DEPTH": outside.spoolMaximumDepth = highest + 1
        case "SIWA_HEALTH_PING_TIMEOUT_MS": outside.healthPingTimeout = .milliseconds(highest + 1)
        default: outside.spoolMaximumAge = .seconds(highest + 1)
        }
        #expect(throws: ReadinessLimits.OutOfRange.self) { try outside.validate() }
    }

    @Test("the spool's write checks run at once, each on its own file: none fails, none is left behind")
    func concurrentSpoolWriteChecks() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory)
            let before = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
            let threads = 8
            let perThread = 200
            let refused = Mutex(0)
            DispatchQueue.concurrentPerform(iterations: threads) { _ in
                for _ in 0..<perThread where !spool.acceptsWrites() {
                    refused.withLock { $0 += 1 }
                }
            }
            #expect(refused.withLock { $0 } == 0)
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted() == before)
        }
    }

    @Test("the files of write checks a killed process left are deleted when the spool opens; nothing else")
    func leftoverWriteChecksAreDeletedAtStart() throws {
        try withSpoolDirectory { directory in
            // Killed mid-check: each check's own name, so no later check of another pid
            // reuses it; and the shared names of earlier releases.
            let leftovers = [
                ".ready-check.29566.1", ".ready-check.29566.2", ".write-check.4242.7", ".ready-check", ".write-check",
            ]
            let others = [".ready-checked", "ready-check.1.1", ".write-checks.1"]
            for name in leftovers + others {
                #expect(FileManager.default.createFile(atPath: directory + "/" + name, contents: Data("\n".utf8)))
            }
            // A directory of that name is not a check's file: unlink leaves it.
            try FileManager.default.createDirectory(
                atPath: directory + "/.ready-check.1.1", withIntermediateDirectories: false)
            _ = try NotificationSpool(directory: directory)
            let after = Set(try FileManager.default.contentsOfDirectory(atPath: directory))
            #expect(after.isDisjoint(with: leftovers))
            #expect(after.isSuperset(of: others + [".ready-check.1.1"]))
        }
    }

    @Test(
        "the notification path may not be a probe's path", arguments: ["/healthz/live", "/healthz/ready", "/healthz/x"])
    func notificationPathIsNotAProbe(path: String) {
        #expect {
            try ServerConfiguration(environment: Self.minimal.merging(["SIWA_NOTIFICATION_PATH": path]) { $1 })
        } throws: { error in
            (error as? ConfigurationError)?.setting == "SIWA_NOTIFICATION_PATH"
        }
    }
}
