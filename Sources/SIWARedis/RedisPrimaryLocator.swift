import Foundation
import Synchronization

/// Finds the current Redis primary through Redis Sentinel, the way Redis' "Guidelines
/// for Redis clients with support for Redis Sentinel" ask:
///
/// 1. ask the sentinels in order for `SENTINEL get-master-addr-by-name <master>`;
/// 2. confirm the address with `ROLE` (the connection that will use it does, see
///    `RedisConnection`); a sentinel whose address is not a master (a sentinel cut off
///    from the last failover names a replica) goes to the back of the list and the next
///    sentinel is asked in the same discovery; the sentinel that named the confirmed
///    primary goes to the front;
/// 3. a connection failure, a timeout, `READONLY` or a `ROLE` that is not master makes
///    the connection `forget` the address, so the next command asks again;
/// 4. a `+switch-master` event from any sentinel (see `RedisSentinelWatcher`) moves the
///    primary at once.
///
/// Every change of the primary in use (a new address, or the address forgotten) raises
/// `generation`. A connection remembers the generation it confirmed its primary at and
/// checks it before and after every command: no connection keeps writing to an address
/// the sentinels no longer name, and a reply that arrives after the primary changed is
/// not trusted (see `RedisConnection.command`).
///
/// Shared by every worker connection and the spool replayer (thread safe). Discoveries
/// run one at a time: workers that find the address forgotten while another one asks
/// wait for that answer instead of asking the sentinels themselves.
public final class RedisPrimaryLocator: Sendable {
    /// One sentinel's address.
    public typealias Sentinel = RedisNodeAddress

    /// A primary's address as the sentinels gave it.
    public typealias Primary = RedisNodeAddress

    /// What a node's `ROLE` said.
    public enum Role: Sendable, Equatable, CustomStringConvertible {
        case master
        /// `slave`, `sentinel`, or whatever else the node answered.
        case other(String)

        public var description: String {
            switch self {
            case .master: "master"
            case .other(let text): text
            }
        }
    }

    /// Connects to an address and asks its `ROLE`; throws when it cannot be reached. The
    /// connection that will use the primary does this (see `RedisConnection`), so a
    /// confirmed master is the node that connection is on.
    public typealias Confirmation = (Primary) throws(RedisError) -> Role

    /// What the locator saw that an operator must be told; the application logs it.
    public enum Event: Sendable, Equatable {
        /// `sentinel` named `primary`, whose `ROLE` was not master: that sentinel has not seen the
        /// last failover (it was cut off, or restarted with an old configuration) and was moved to
        /// the back of the list.
        case sentinelNamedNonPrimary(sentinel: Sentinel, primary: Primary, role: Role)
        /// `sentinel` named `primary`, whose ROLE could not be asked (unreachable, a timeout, refused).
        case sentinelNamedUnreachable(sentinel: Sentinel, primary: Primary, message: String)
        /// `sentinel` named `primary`, which a `+switch-master` announced as the old primary a
        /// moment ago (it still says master until the sentinels demote it): that sentinel has not
        /// caught up yet and was moved to the back of the list.
        case sentinelNamedDemoted(sentinel: Sentinel, primary: Primary)
        /// `sentinel` named `primary` under `configEpoch`, lower than the `highest` another sentinel
        /// answered with: it has not heard of the last failover and was moved to the back.
        case sentinelBehind(sentinel: Sentinel, primary: Primary, configEpoch: UInt64, highest: UInt64)
        /// `sentinel` announced `event` (`+odown`, `+try-failover`) for `primary`: a failover may be
        /// under way, so the primary in use was dropped and the next discovery waits for it to settle.
        case failoverSuspected(sentinel: Sentinel, primary: Primary, event: String)
        /// A discovery confirmed `primary`, named by `sentinel`, after `previous` (nil: none known).
        case primaryFound(sentinel: Sentinel, primary: Primary, previous: Primary?)
        /// `sentinel` announced `+switch-master` from `old` to `new`: every connection leaves `old`.
        case switchAnnounced(sentinel: Sentinel, old: Primary, new: Primary)
        /// The `+switch-master` subscription on `sentinel` failed (logged once until it is back).
        case sentinelWatchFailed(sentinel: Sentinel, message: String)
        /// The `+switch-master` subscription on `sentinel` is up again after a failure.
        case sentinelWatchRestored(sentinel: Sentinel)
    }

    public let masterName: String
    let sentinelPassword: String?
    /// TLS to the sentinels; nil: plain TCP.
    let sentinelTLS: RedisTLS?
    let timeout: Duration
    let observer: (@Sendable (Event) -> Void)?
    /// The clock the +switch-master refusal period is measured on (injected by tests).
    let now: @Sendable () -> ContinuousClock.Instant

    private struct State {
        var sentinels: [Sentinel]
        var primary: Primary?
        /// Raised at every change of `primary` (another address, or forgotten).
        var generation: UInt64 = 1
        /// The last primary any discovery found: a new one is a failover seen.
        var lastFound: Primary?
        var discoveries = 0
        var failovers = 0
        var staleAnswers = 0
        /// The last address a sentinel named, confirmed or not.
        var lastNamed: Primary?
        /// Raised at every `+sdown`, `+odown` or `+try-failover` a sentinel announces for the
        /// master: a discovery that saw it change while it confirmed an address does not use it.
        var suspicions: UInt64 = 0
        /// Addresses a `+switch-master` announced as the old primary, until when they are not used.
        var demoted: [Primary: ContinuousClock.Instant] = [:]

        func isDemoted(_ primary: Primary, at now: ContinuousClock.Instant) -> Bool {
            demoted[primary].map { now < $0 } ?? false
        }

        mutating func use(_ found: Primary?) {
            guard primary != found else { return }
            primary = found
            generation &+= 1
            guard let found else { return }
            if let previous = lastFound, previous != found { failovers += 1 }
            lastFound = found
        }

        mutating func moveToFront(_ sentinel: Sentinel) {
            guard let index = sentinels.firstIndex(of: sentinel), index != 0 else { return }
            sentinels.remove(at: index)
            sentinels.insert(sentinel, at: 0)
        }

        mutating func moveToBack(_ sentinel: Sentinel) {
            guard let index = sentinels.firstIndex(of: sentinel), index != sentinels.count - 1 else { return }
            sentinels.remove(at: index)
            sentinels.append(sentinel)
        }
    }

    private let state: Mutex<State>
    /// Held while the sentinels are asked, so one discovery runs at a time.
    private let discovery = Mutex(())

    /// `timeout` bounds each sentinel's connect and answer; `observer` hears what an operator
    /// must be told (on the thread that saw it).
    public init(
        sentinels: [Sentinel], masterName: String, sentinelPassword: String?, timeout: Duration,
        sentinelTLS: RedisTLS? = nil, observer: (@Sendable (Event) -> Void)? = nil,
        now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.now = now
        self.masterName = masterName
        self.sentinelPassword = sentinelPassword
        self.sentinelTLS = sentinelTLS
        self.timeout = timeout
        self.observer = observer
        state = Mutex(State(sentinels: sentinels))
    }

    /// The sentinels, in the order they will be asked next.
    public var sentinels: [Sentinel] { state.withLock { $0.sentinels } }

    /// The primary in use, or nil when none is known (never found, or forgotten after a failure).
    public var current: Primary? { state.withLock { $0.primary } }

    /// Raised at every change of the primary in use: a connection that confirmed its primary at
    /// another generation must not send to it again before it asks (see `RedisConnection`).
    public var generation: UInt64 { state.withLock { $0.generation } }

    /// How many times the sentinels were asked.
    public var discoveries: Int { state.withLock { $0.discoveries } }

    /// How many times the primary in use moved to another address (a discovery or `+switch-master`).
    public var failovers: Int { state.withLock { $0.failovers } }

    /// The last address a sentinel named, whether or not it could be confirmed: what a start-up
    /// check can try, to tell a refusal (a wrong password) from an outage when none was confirmed.
    public var lastNamed: Primary? { state.withLock { $0.lastNamed } }

    /// How many sentinel answers named an address whose `ROLE` was not master.
    public var staleAnswers: Int { state.withLock { $0.staleAnswers } }

    private var known: (primary: Primary, generation: UInt64)? {
        state.withLock { state in state.primary.map { ($0, state.generation) } }
    }

    /// The primary to use, confirmed by `confirm` (the caller's own connection), with the
    /// generation it was confirmed at. The known primary when it is still a master; else the
    /// sentinels are asked (one discovery at a time). A known primary that cannot be reached
    /// is forgotten and the error thrown: the caller's next try asks the sentinels.
    public func primary(confirmingWith confirm: Confirmation) throws(RedisError) -> (
        primary: Primary, generation: UInt64
    ) {
        if let known, let confirmed = try confirmKnown(known, confirm) { return confirmed }
        return try discovery.withLock { _ throws(RedisError) -> (primary: Primary, generation: UInt64) in
            // Another thread may have found it while this one waited.
            if let known, let confirmed = try confirmKnown(known, confirm) { return confirmed }
            return try discover(confirmingWith: confirm)
        }
    }

    /// The known primary confirmed; nil when its ROLE is not master (it is forgotten then).
    private func confirmKnown(
        _ known: (primary: Primary, generation: UInt64), _ confirm: Confirmation
    ) throws(RedisError) -> (primary: Primary, generation: UInt64)? {
        let role: Role
        do {
            role = try confirm(known.primary)
        } catch {
            forget(known.primary)
            throw error
        }
        guard role == .master else {
            forget(known.primary)
            return nil
        }
        return known
    }

    /// A connection found `primary` unusable (it failed, timed out, answered READONLY, or
    /// its ROLE is not master): every connection asks the sentinels before its next command.
    public func forget(_ primary: Primary) {
        state.withLock { state in
            if state.primary == primary { state.use(nil) }
        }
    }

    /// A sentinel published `+switch-master <master> <old-ip> <old-port> <new-ip> <new-port>`:
    /// the primary in use becomes `new` at once (each connection confirms its ROLE when it
    /// reconnects), and no connection sends another command to `old`.
    ///
    /// `old` is not used for `demotedPeriod` (or until an announcement names it as the new
    /// primary): a sentinel that has not caught up yet may still name it, and a node that was
    /// paused past the failover still says master until the sentinels demote it.
    public func switchAnnounced(by sentinel: Sentinel, old: Primary, new: Primary) {
        let instant = self.now()
        let changed = state.withLock { state in
            if old != new { state.demoted[old] = instant + Self.demotedPeriod }
            state.demoted[new] = nil
            state.demoted = state.demoted.filter { instant < $0.value }
            guard state.primary != new else { return false }
            state.use(new)
            return true
        }
        if changed { observer?(.switchAnnounced(sentinel: sentinel, old: old, new: new)) }
    }

    /// A sentinel announced `+sdown`, `+odown` or `+try-failover` for `primary`: the sentinels may be
    /// promoting another node while this one still answers (it may be paused and about to
    /// resume saying master). The primary in use is dropped if it is that address, so every
    /// connection asks again, and the discovery waits until the sentinels agree (`SentinelTally`).
    public func failoverSuspected(by sentinel: Sentinel, primary: Primary, event: String) {
        let dropped = state.withLock { state in
            // About the address in use or the one being confirmed: a stale sentinel's view of
            // another node holds nothing up.
            if state.primary == primary || state.lastNamed == primary { state.suspicions &+= 1 }
            guard state.primary == primary else { return false }
            state.use(nil)
            return true
        }
        if dropped { observer?(.failoverSuspected(sentinel: sentinel, primary: primary, event: event)) }
    }

    /// How long an address announced as the old primary is refused: the sentinels convert a
    /// returning old primary to a replica within about 10 s (their INFO period).
    public static let demotedPeriod = Duration.seconds(60)

    /// Asks every sentinel now (`SENTINEL MASTER`), weighs the answers (`SentinelTally`: a
    /// majority answered, the highest `config-epoch`, no failover under way) and confirms the
    /// candidates with `confirm`, in the order the sentinels were asked, until one is a master.
    /// A sentinel behind the highest epoch, or whose address is not a master, goes to the back;
    /// the one whose address is confirmed goes to the front.
    public func discover(confirmingWith confirm: Confirmation) throws(RedisError) -> (
        primary: Primary, generation: UInt64
    ) {
        let (order, suspicionsBefore) = state.withLock { state in
            state.discoveries += 1
            return (state.sentinels, state.suspicions)
        }
        let tally = SentinelTally(configured: order.count)
        let settled = try tally.settle(askEach(order), masterName: masterName)
        for answer in settled.behind {
            state.withLock { state in
                state.staleAnswers += 1
                state.moveToBack(answer.sentinel)
            }
            observer?(
                .sentinelBehind(
                    sentinel: answer.sentinel, primary: answer.primary, configEpoch: answer.configEpoch,
                    highest: settled.highestEpoch))
        }
        var unconfirmed = SentinelTally.Unconfirmed()
        for (sentinel, found) in settled.candidates {
            if let reason = unusable(found, namedBy: sentinel, confirm) {
                unconfirmed.record(reason)
                continue
            }
            // The sentinels again, now that the node answered: a ROLE that waited for a paused
            // node to resume may come back after a failover began (its verdict is then stale).
            try confirmStillSettled(found, epoch: settled.highestEpoch, order: order, tally: tally)
            return try use(found, namedBy: sentinel, after: unconfirmed, suspicionsBefore: suspicionsBefore)
        }
        throw unconfirmed.error
    }

    /// Why the address `sentinel` named cannot be used (announced as the old primary,
    /// unreachable, or its ROLE not master), told to the observer; nil when it is a master.
    private func unusable(
        _ found: Primary, namedBy sentinel: Sentinel, _ confirm: Confirmation
    ) -> SentinelTally.Unusable? {
        state.withLock { $0.lastNamed = found }
        if state.withLock({ $0.isDemoted(found, at: now()) }) {
            state.withLock { state in
                state.staleAnswers += 1
                state.moveToBack(sentinel)
            }
            observer?(.sentinelNamedDemoted(sentinel: sentinel, primary: found))
            return SentinelTally.Unusable(
                "sentinel \(sentinel) named \(found) (announced as the old primary by +switch-master)", stale: nil)
        }
        let role: Role
        do {
            role = try confirm(found)
        } catch {
            observer?(.sentinelNamedUnreachable(sentinel: sentinel, primary: found, message: error.message))
            return SentinelTally.Unusable(
                "sentinel \(sentinel) named \(found) (not confirmed: \(error.message))", stale: sentinel)
        }
        guard role == .master else {
            state.withLock { state in
                state.staleAnswers += 1
                state.moveToBack(sentinel)
            }
            observer?(.sentinelNamedNonPrimary(sentinel: sentinel, primary: found, role: role))
            return SentinelTally.Unusable("sentinel \(sentinel) named \(found) (ROLE: \(role))", stale: sentinel)
        }
        return nil
    }

    /// Makes the confirmed `found` the primary in use, unless a `+switch-master` or a
    /// suspected failover came while it was confirmed; `sentinel` goes to the front.
    private func use(
        _ found: Primary, namedBy sentinel: Sentinel, after unconfirmed: SentinelTally.Unconfirmed,
        suspicionsBefore: UInt64
    ) throws(RedisError) -> (primary: Primary, generation: UInt64) {
        let installed = state.withLock { state -> (previous: Primary?, generation: UInt64)? in
            // A +switch-master announced while this node was being confirmed wins over the
            // sentinel's older answer (the node said master: it had not been demoted yet).
            if state.isDemoted(found, at: now()) { return nil }
            // So does a sentinel's +sdown/+odown/+try-failover: a failover may have begun.
            if state.suspicions != suspicionsBefore { return nil }
            let previous = state.primary
            // Sentinels that named another address are stale: behind the ones that agree.
            for stale in unconfirmed.staleSentinels { state.moveToBack(stale) }
            state.moveToFront(sentinel)
            state.use(found)
            return (previous, state.generation)
        }
        guard let (previous, generation) = installed else {
            throw RedisError(
                .connectionLost,
                "sentinel \(sentinel) named \(found), which a +switch-master announced as the old primary, "
                    + "or a sentinel announced a failover may begin, while its ROLE was asked; asking again")
        }
        if previous != found || !unconfirmed.reasons.isEmpty {
            observer?(.primaryFound(sentinel: sentinel, primary: found, previous: previous))
        }
        return (found, generation)
    }

    /// Asks the sentinels a second time, after `found` confirmed master: they must still be
    /// settled, under the same highest epoch, naming `found`.
    private func confirmStillSettled(
        _ found: Primary, epoch: UInt64, order: [Sentinel], tally: SentinelTally
    ) throws(RedisError) {
        let again = askEach(order)
        switch tally.verdict(again.answers) {
        case .unsettled(let reason):
            throw RedisError(.sentinelsUnsettled, "no primary is used yet: \(reason) (while \(found) was confirmed)")
        case .candidates(let named, _):
            let epochNow = again.answers.map(\.configEpoch).max() ?? 0
            guard epochNow == epoch, named.contains(where: { $0.primary == found }) else {
                throw RedisError(
                    .sentinelsUnsettled,
                    "no primary is used yet: the sentinels' answer changed while \(found) was confirmed "
                        + "(config-epoch \(epoch) then \(epochNow))")
            }
        }
    }

    /// How `sentinel` is reached: its password and TLS, database 0 (discovery and the watchers).
    func endpoint(of sentinel: Sentinel) -> RedisEndpoint {
        RedisEndpoint(
            address: .tcp(host: sentinel.host, port: sentinel.port), password: sentinelPassword, tls: sentinelTLS)
    }

    /// Asks each sentinel in `order`, one after the other.
    private func askEach(_ order: [Sentinel]) -> SentinelTally.Round {
        var round = SentinelTally.Round()
        for sentinel in order { round.record(ask(sentinel), from: sentinel) }
        return round
    }

    /// Asks one sentinel `SENTINEL MASTER <name>`, on a connection of its own.
    private func ask(_ sentinel: Sentinel) -> SentinelTally.Reply {
        let connection = RedisConnection(
            endpoint: endpoint(of: sentinel), connectTimeout: timeout, commandTimeout: timeout)
        defer { connection.disconnect() }
        do {
            return SentinelTally.Reply(
                .success(try connection.command("SENTINEL", "MASTER", masterName)), from: sentinel)
        } catch {
            return SentinelTally.Reply(.failure(error), from: sentinel)
        }
    }
}
