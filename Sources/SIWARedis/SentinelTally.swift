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
        public let primary: RedisNodeAddress
        public let configEpoch: UInt64
        /// `flags`, split at commas: `master`, `s_down`, `o_down`, `failover_in_progress`, ...
        public let flags: Set<String>
        /// The sentinels' `quorum` for this master.
        public let quorum: Int

        public init(
            sentinel: RedisNodeAddress, primary: RedisNodeAddress, configEpoch: UInt64,
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
                sentinel: sentinel, primary: RedisNodeAddress(host: host, port: port), configEpoch: epoch,
                flags: Set(flagsText.split(separator: ",").map(String.init)), quorum: max(1, quorum))
        }
    }

    /// What the tally allows.
    public enum Verdict: Sendable, Equatable {
        /// Try these addresses, in order (each confirmed with `ROLE` by the caller). `behind`:
        /// sentinels whose epoch is lower than the highest, to move to the back of the list.
        case candidates([(sentinel: RedisNodeAddress, primary: RedisNodeAddress)], behind: [Answer])
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
        var candidates: [(sentinel: RedisNodeAddress, primary: RedisNodeAddress)] = []
        for answer in current where !candidates.contains(where: { $0.primary == answer.primary }) {
            candidates.append((answer.sentinel, answer.primary))
        }
        return .candidates(candidates, behind: behind)
    }

    /// What the tally lets a discovery try: the candidates, the sentinels behind the highest
    /// epoch, and that epoch.
    public struct Settled: Sendable {
        public let candidates: [(sentinel: RedisNodeAddress, primary: RedisNodeAddress)]
        public let behind: [Answer]
        public let highestEpoch: UInt64
    }

    /// Weighs one round of answers: the candidates to confirm, or the error that says why
    /// there are none (no answer at all: `Round.noAnswerError`; `sentinelsUnsettled`).
    public func settle(_ round: Round, masterName: String) throws(RedisError) -> Settled {
        if round.answers.isEmpty { throw round.noAnswerError(masterName: masterName) }
        switch verdict(round.answers) {
        case .unsettled(let reason):
            throw RedisError(.sentinelsUnsettled, "no primary is used yet: \(reason)")
        case .candidates(let found, let behind):
            return Settled(
                candidates: found, behind: behind, highestEpoch: round.answers.map(\.configEpoch).max() ?? 0)
        }
    }

    /// One sentinel's reply to `SENTINEL MASTER <name>`, read: an answer the rule can weigh,
    /// "no such master", or a failure.
    public enum Reply: Sendable {
        case answered(Answer)
        case unknownMaster
        case failed(RedisError)

        /// Reads what `sentinel` replied (or how asking it failed). A reply without the fields
        /// the rule needs counts as not knowing the master.
        public init(_ reply: Result<RedisReply, RedisError>, from sentinel: RedisNodeAddress) {
            switch reply {
            case .success(let reply):
                guard let fields = reply.fieldMap, let answer = Answer.parse(fields, from: sentinel) else {
                    self = .unknownMaster
                    return
                }
                self = .answered(answer)
            case .failure(let error) where error.reply == .err && error.message.contains("No such master"):
                self = .unknownMaster
            case .failure(let error):
                self = .failed(error)
            }
        }
    }

    /// What one discovery's sentinels replied, sorted by kind, for the tally and the error.
    public struct Round: Sendable {
        public private(set) var answers: [Answer] = []
        var unreachable: [String] = []
        var unknownMaster: [RedisNodeAddress] = []
        var refusedLogin: [String] = []
        var refusedTLS: [String] = []
        var certificateRefusal: RedisError.CertificateRefusal?

        public init() {}

        public mutating func record(_ reply: Reply, from sentinel: RedisNodeAddress) {
            switch reply {
            case .answered(let answer): answers.append(answer)
            case .unknownMaster: unknownMaster.append(sentinel)
            case .failed(let error) where error.code == .tlsRefused:
                refusedTLS.append("\(sentinel): \(error.message)")
                certificateRefusal = certificateRefusal ?? error.certificateRefusal
            // A sentinel that wants a password and got none or a wrong one, or got one it does not want.
            case .failed(let error) where error.isLoginRefused || error.reply == .noAuth:
                refusedLogin.append("\(sentinel): \(error.message)")
            case .failed(let error): unreachable.append("\(sentinel): \(error.message)")
            }
        }

        /// Why no sentinel answered about the master: TLS, the password, the name, or nobody home.
        public func noAnswerError(masterName: String) -> RedisError {
            if !refusedTLS.isEmpty {
                return RedisError(
                    .tlsRefused, "TLS to the sentinels was refused (\(refusedTLS.joined(separator: "; ")))",
                    field: .sentinelTLS, certificateRefusal: certificateRefusal)
            }
            if !refusedLogin.isEmpty {
                return RedisError(
                    .sentinelLoginRefused, "the sentinels refused it (\(refusedLogin.joined(separator: "; ")))",
                    field: .sentinelPassword)
            }
            if !unknownMaster.isEmpty {
                return RedisError(
                    .sentinelUnknownMaster,
                    "no sentinel monitors a master named '\(masterName)' (asked "
                        + "\(unknownMaster.map(\.description).joined(separator: ", ")))", field: .sentinelMasterName)
            }
            return RedisError(
                .sentinelUnreachable, "no sentinel answered (\(unreachable.joined(separator: "; ")))",
                field: .sentinels)
        }
    }

    /// Why one candidate was not used, and the sentinel that named it when that sentinel is
    /// to go behind the one whose candidate is confirmed.
    public struct Unusable: Sendable {
        public let reason: String
        public let stale: RedisNodeAddress?

        public init(_ reason: String, stale: RedisNodeAddress?) {
            self.reason = reason
            self.stale = stale
        }
    }

    /// The candidates of one discovery that were not used, for the error when none is.
    public struct Unconfirmed: Sendable {
        public private(set) var reasons: [String] = []
        public private(set) var staleSentinels: [RedisNodeAddress] = []

        public init() {}

        public mutating func record(_ unusable: Unusable) {
            reasons.append(unusable.reason)
            if let stale = unusable.stale { staleSentinels.append(stale) }
        }

        /// No candidate could be confirmed.
        public var error: RedisError {
            RedisError(
                .connectionFailed,
                "no sentinel named a Redis primary that could be confirmed (\(reasons.joined(separator: "; ")))")
        }
    }
}
