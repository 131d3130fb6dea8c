/// What the sentinels said, weighed: which addresses may be tried as the primary, or why none
/// may be yet. Pure (no socket, no clock), so the rule is tested on its own
/// (`SentinelTallyTests`) and `RedisPrimaryLocator` only asks and confirms.
///
/// One sentinel's answer plus `ROLE` is not enough after the primary was lost: a primary
/// paused past `down-after-milliseconds` resumes still saying `master`, and a sentinel that
/// has not yet heard of the failover still names it, so writes made then vanish when the
/// sentinels demote it. The rule (reasoning in docs/deployment.md, "When a paused primary
/// resumes"):
///
/// 1. a majority of the configured sentinels must answer about the master;
/// 2. only the answers under the highest `config-epoch` count (an epoch is raised only by a
///    failover a majority of sentinels authorised: a lower one is a sentinel behind);
/// 3. none of those may report the master `o_down` or a failover in progress, and fewer than
///    the quorum may report it `s_down` (a quorum of `s_down` can still start a failover);
/// 4. the addresses they name are the candidates, in the order the sentinels were asked;
///    the locator confirms each with `ROLE` and refuses one a `+switch-master` announced as old.
///
/// Until then the caller gets `sentinelsUnsettled`, an outage like any other: notifications
/// are spooled, nothing is replayed, and the next command asks again.
public struct SentinelTally: Sendable {
    /// What one sentinel answered to `SENTINEL MASTER <name>`.
    public struct Answer: Sendable, Equatable {
        public let sentinel: RedisNodeAddress
        public let primary: RedisPrimaryLocator.Primary
        public let configEpoch: UInt64
        /// `flags`, split at commas: `master`, `s_down`, `o_down`, `failover_in_progress`, ...
        public let flags: Set<String>
        /// The sentinels' `quorum` for this master.
        public let quorum: Int

        public init(
            sentinel: RedisNodeAddress, primary: RedisPrimaryLocator.Primary, configEpoch: UInt64,
            flags: Set<String>, quorum: Int
        ) {
            self.sentinel = sentinel
            self.primary = primary
            self.configEpoch = configEpoch
            self.flags = flags
            self.quorum = quorum
        }

        /// Reads the flat field list `SENTINEL MASTER` returns; nil when a field the rule needs
        /// is missing or not a number.
        public static func parse(_ fields: [String: String], from sentinel: RedisNodeAddress) -> Answer? {
            guard let host = fields["ip"], !host.isEmpty, let portText = fields["port"], let port = Int(portText),
                (1...65_535).contains(port), let epochText = fields["config-epoch"],
                let epoch = UInt64(epochText), let flagsText = fields["flags"]
            else { return nil }
            let quorum = fields["quorum"].flatMap { Int($0) } ?? 1
            return Answer(
                sentinel: sentinel, primary: RedisPrimaryLocator.Primary(host: host, port: port), configEpoch: epoch,
                flags: Set(flagsText.split(separator: ",").map(String.init)), quorum: max(1, quorum))
        }
    }

    /// What the tally allows.
    public enum Verdict: Sendable, Equatable {
        /// Try these addresses, in order (each confirmed with `ROLE` by the caller). `behind`:
        /// sentinels whose epoch is lower than the highest, to move to the back of the list.
        case candidates([(sentinel: RedisNodeAddress, primary: RedisPrimaryLocator.Primary)], behind: [Answer])
        /// No address may be used yet; the message says why, naming the sentinels.
        case unsettled(String)

        public static func == (left: Verdict, right: Verdict) -> Bool {
            switch (left, right) {
            case (.candidates(let a, let behindA), .candidates(let b, let behindB)):
                a.map(\.sentinel) == b.map(\.sentinel) && a.map(\.primary) == b.map(\.primary) && behindA == behindB
            case (.unsettled(let a), .unsettled(let b)): a == b
            default: false
            }
        }
    }

    /// How many sentinels are configured: a majority of them must answer.
    public let configured: Int

    public init(configured: Int) {
        self.configured = configured
    }

    /// The fewest answers that make a majority of the configured sentinels.
    public var majority: Int { configured / 2 + 1 }

    /// Flags that mean a failover may be under way: no address is settled while one shows.
    static let failoverFlags = ["o_down", "failover_in_progress"]

    /// Weighs `answers` (in the order the sentinels were asked).
    public func verdict(_ answers: [Answer]) -> Verdict {
        guard answers.count >= majority else {
            return .unsettled(
                "only \(answers.count) of \(configured) sentinels answered about the master; "
                    + "\(majority) must agree before a primary is used")
        }
        let highest = answers.map(\.configEpoch).max() ?? 0
        let current = answers.filter { $0.configEpoch == highest }
        let behind = answers.filter { $0.configEpoch < highest }
        for answer in current {
            if let flag = Self.failoverFlags.first(where: { answer.flags.contains($0) }) {
                return .unsettled(
                    "sentinel \(answer.sentinel) reports the master at \(answer.primary) \(flag) "
                        + "(config-epoch \(highest)): waiting for the failover to end")
            }
        }
        let subjectivelyDown = current.filter { $0.flags.contains("s_down") }
        let quorum = current.map(\.quorum).min() ?? 1
        if subjectivelyDown.count >= quorum {
            return .unsettled(
                "\(subjectivelyDown.count) sentinels (a quorum: \(quorum)) report the master at "
                    + "\(subjectivelyDown[0].primary) s_down: a failover may start")
        }
        var candidates: [(sentinel: RedisNodeAddress, primary: RedisPrimaryLocator.Primary)] = []
        for answer in current where !candidates.contains(where: { $0.primary == answer.primary }) {
            candidates.append((answer.sentinel, answer.primary))
        }
        return .candidates(candidates, behind: behind)
    }
}
