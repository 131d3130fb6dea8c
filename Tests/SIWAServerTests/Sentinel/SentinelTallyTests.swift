import Foundation
import SIWARedis
import Synchronization
import Testing

/// The rule that decides when a sentinel's answer may be used (`SentinelTally`), in process:
/// answers built by hand, no socket and no clock.
@Suite("Redis Sentinel: the sentinels' answers weighed")
struct SentinelTallyTests {
    static let sentinelA = RedisNodeAddress(host: "10.0.0.1", port: 26379)
    static let sentinelB = RedisNodeAddress(host: "10.0.0.2", port: 26379)
    static let sentinelC = RedisNodeAddress(host: "10.0.0.3", port: 26379)
    static let oldPrimary = RedisPrimaryLocator.Primary(host: "10.0.1.1", port: 6379)
    static let newPrimary = RedisPrimaryLocator.Primary(host: "10.0.1.2", port: 6379)

    static func answer(
        _ sentinel: RedisNodeAddress, _ primary: RedisPrimaryLocator.Primary, epoch: UInt64,
        flags: Set<String> = ["master"], quorum: Int = 2
    ) -> SentinelTally.Answer {
        SentinelTally.Answer(sentinel: sentinel, primary: primary, configEpoch: epoch, flags: flags, quorum: quorum)
    }

    static func isUnsettled(_ verdict: SentinelTally.Verdict, mentioning text: String) -> Bool {
        if case .unsettled(let reason) = verdict { return reason.contains(text) }
        return false
    }

    @Test("all three agree: the address is the one candidate")
    func agreement() {
        let verdict = SentinelTally(configured: 3).verdict([
            Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4),
            Self.answer(Self.sentinelB, Self.oldPrimary, epoch: 4),
            Self.answer(Self.sentinelC, Self.oldPrimary, epoch: 4),
        ])
        #expect(verdict == .candidates([(Self.sentinelA, Self.oldPrimary)], behind: []))
    }

    @Test("fewer than a majority answered: unsettled, naming how many")
    func minority() {
        let verdict = SentinelTally(configured: 3).verdict([Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4)])
        #expect(Self.isUnsettled(verdict, mentioning: "only 1 of 3 sentinels answered"))
        // Two of three is a majority.
        let two = SentinelTally(configured: 3).verdict([
            Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4),
            Self.answer(Self.sentinelB, Self.oldPrimary, epoch: 4),
        ])
        #expect(two == .candidates([(Self.sentinelA, Self.oldPrimary)], behind: []))
    }

    @Test("the resumed old primary: the failover's leader says failover_in_progress, the others still name it")
    func failoverInProgress() {
        let verdict = SentinelTally(configured: 3).verdict([
            Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4),
            Self.answer(Self.sentinelB, Self.oldPrimary, epoch: 4, flags: ["master", "failover_in_progress"]),
            Self.answer(Self.sentinelC, Self.oldPrimary, epoch: 4),
        ])
        #expect(Self.isUnsettled(verdict, mentioning: "sentinel 10.0.0.2:26379 reports the master"))
        #expect(Self.isUnsettled(verdict, mentioning: "failover_in_progress"))
    }

    @Test("o_down anywhere under the highest epoch: unsettled")
    func objectivelyDown() {
        let verdict = SentinelTally(configured: 3).verdict([
            Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4, flags: ["master", "s_down", "o_down"]),
            Self.answer(Self.sentinelB, Self.oldPrimary, epoch: 4),
            Self.answer(Self.sentinelC, Self.oldPrimary, epoch: 4),
        ])
        #expect(Self.isUnsettled(verdict, mentioning: "o_down"))
    }

    @Test("s_down on fewer than the quorum is no failover; on a quorum it may become one")
    func subjectivelyDown() {
        let one = SentinelTally(configured: 3).verdict([
            Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4, flags: ["master", "s_down"]),
            Self.answer(Self.sentinelB, Self.oldPrimary, epoch: 4),
            Self.answer(Self.sentinelC, Self.oldPrimary, epoch: 4),
        ])
        #expect(one == .candidates([(Self.sentinelA, Self.oldPrimary)], behind: []))
        let quorum = SentinelTally(configured: 3).verdict([
            Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4, flags: ["master", "s_down"]),
            Self.answer(Self.sentinelB, Self.oldPrimary, epoch: 4, flags: ["s_down", "master"]),
            Self.answer(Self.sentinelC, Self.oldPrimary, epoch: 4),
        ])
        #expect(Self.isUnsettled(quorum, mentioning: "a quorum: 2"))
    }

    @Test("the failover ended on one sentinel: its higher epoch wins, the two behind go to the back")
    func highestEpochWins() {
        let verdict = SentinelTally(configured: 3).verdict([
            Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4),
            Self.answer(Self.sentinelB, Self.newPrimary, epoch: 5),
            Self.answer(Self.sentinelC, Self.oldPrimary, epoch: 4),
        ])
        #expect(
            verdict
                == .candidates(
                    [(Self.sentinelB, Self.newPrimary)],
                    behind: [
                        Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4),
                        Self.answer(Self.sentinelC, Self.oldPrimary, epoch: 4),
                    ]))
        // A sentinel behind with its old primary s_down or o_down holds nothing up.
        let behindDown = SentinelTally(configured: 3).verdict([
            Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4, flags: ["master", "s_down", "o_down"]),
            Self.answer(Self.sentinelB, Self.newPrimary, epoch: 5),
            Self.answer(Self.sentinelC, Self.newPrimary, epoch: 5),
        ])
        #expect(
            behindDown
                == .candidates(
                    [(Self.sentinelB, Self.newPrimary)],
                    behind: [
                        Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 4, flags: ["master", "s_down", "o_down"])
                    ]
                ))
    }

    @Test("two addresses under one epoch: both are candidates, in the order asked (ROLE decides)")
    func twoAddressesOneEpoch() {
        let verdict = SentinelTally(configured: 2).verdict([
            Self.answer(Self.sentinelA, Self.newPrimary, epoch: 0),
            Self.answer(Self.sentinelB, Self.oldPrimary, epoch: 0),
        ])
        #expect(
            verdict == .candidates([(Self.sentinelA, Self.newPrimary), (Self.sentinelB, Self.oldPrimary)], behind: []))
    }

    @Test("SENTINEL MASTER's field list is read; a missing epoch or port is no answer")
    func parse() {
        let fields = [
            "name": "m", "ip": "10.0.1.1", "port": "6379", "flags": "master,s_down", "config-epoch": "7",
            "quorum": "2",
        ]
        #expect(
            SentinelTally.Answer.parse(fields, from: Self.sentinelA)
                == Self.answer(Self.sentinelA, Self.oldPrimary, epoch: 7, flags: ["master", "s_down"]))
        var noEpoch = fields
        noEpoch["config-epoch"] = nil
        #expect(SentinelTally.Answer.parse(noEpoch, from: Self.sentinelA) == nil)
        var badPort = fields
        badPort["port"] = "0"
        #expect(SentinelTally.Answer.parse(badPort, from: Self.sentinelA) == nil)
    }

    @Test("+odown or +try-failover for the primary in use drops it: every connection asks again")
    func failoverSuspectedDropsThePrimary() throws {
        let events = Mutex<[RedisPrimaryLocator.Event]>([])
        let locator = RedisPrimaryLocator(
            sentinels: [Self.sentinelA], masterName: "m", sentinelPassword: nil, timeout: .seconds(1),
            observer: { event in events.withLock { $0.append(event) } })
        locator.switchAnnounced(by: Self.sentinelA, old: Self.oldPrimary, new: Self.newPrimary)
        let generation = locator.generation
        // About another address: nothing changes.
        locator.failoverSuspected(by: Self.sentinelA, primary: Self.oldPrimary, event: "+odown")
        #expect(locator.current == Self.newPrimary)
        #expect(locator.generation == generation)
        locator.failoverSuspected(by: Self.sentinelA, primary: Self.newPrimary, event: "+try-failover")
        #expect(locator.current == nil)
        #expect(locator.generation == generation + 1)
        #expect(
            events.withLock { $0.last }
                == .failoverSuspected(sentinel: Self.sentinelA, primary: Self.newPrimary, event: "+try-failover"))
    }
}
