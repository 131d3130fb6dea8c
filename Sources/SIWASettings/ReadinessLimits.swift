import SIWAJSON
import SIWASupport

/// The limits beyond which an instance says it is not ready (`/healthz/ready` answers 503),
/// so that an orchestrator sends new notifications to another instance while this one's
/// spool drains. Zero turns a limit off.
public struct ReadinessLimits: Sendable, Equatable {
    /// Records waiting in the spool beyond which the instance is not ready: a bound on the
    /// spool's disk use (about 1.5 kB a record) well under a 1 GiB volume.
    public static let defaultSpoolMaximumDepth = 100_000
    static let spoolMaximumDepthRange = 0...100_000_000
    /// The age of the oldest waiting record beyond which the instance is not ready. Off by
    /// default: in an outage of Redis every instance's spool ages together, and taking all
    /// of them out of the load balancer would turn an outage the spool absorbs into refusals.
    public static let defaultSpoolMaximumAge: Duration = .zero
    static let spoolMaximumAgeRange: ClosedRange<Duration> = .zero ... .seconds(30 * 86_400)
    /// How long `/healthz` waits for Redis's PING before answering that Redis did not
    /// answer: 80 ms, so it is answered within 100 ms whatever Redis does.
    public static let defaultHealthPingTimeout: Duration = .milliseconds(80)
    /// From 10 ms to 2 s: a Redis in another region answers a PING in tens of milliseconds,
    /// a balancer's probe gives up after a few seconds, and each waiting probe holds a worker.
    static let healthPingTimeoutRange: ClosedRange<Duration> = .milliseconds(10) ... .milliseconds(2000)
    /// The most `/healthz/ready` waits for the PING, whatever `healthPingTimeout` says: a
    /// Redis that does not answer within it sends readiness to the spool's write check, which
    /// decides alone; a longer wait could only outlast the orchestrator's probe timeout (2 s
    /// in the shipped manifests) and take every instance out at once.
    public static let readinessPingLimit: Duration = .milliseconds(80)

    /// 0: no limit.
    public var spoolMaximumDepth: Int
    /// Zero: no limit.
    public var spoolMaximumAge: Duration
    /// The wait of `/healthz` for Redis's PING (`SIWA_HEALTH_PING_TIMEOUT_MS`).
    public var healthPingTimeout: Duration
    /// The wait of `/healthz/ready` for the same PING: the shorter of the two.
    public var readinessPingTimeout: Duration { min(healthPingTimeout, Self.readinessPingLimit) }

    public init(
        spoolMaximumDepth: Int = Self.defaultSpoolMaximumDepth, spoolMaximumAge: Duration = Self.defaultSpoolMaximumAge,
        healthPingTimeout: Duration = Self.defaultHealthPingTimeout
    ) {
        self.spoolMaximumDepth = spoolMaximumDepth
        self.spoolMaximumAge = spoolMaximumAge
        self.healthPingTimeout = healthPingTimeout
    }

    /// A limit outside its range, named.
    public struct OutOfRange: Error, Equatable {
        public let limit: String
    }

    /// Refuses a limit outside its range (the settings table refuses the same values first).
    public func validate() throws(OutOfRange) {
        guard Self.spoolMaximumDepthRange.contains(spoolMaximumDepth) else {
            throw OutOfRange(limit: "spoolMaximumDepth")
        }
        guard Self.spoolMaximumAgeRange.contains(spoolMaximumAge) else { throw OutOfRange(limit: "spoolMaximumAge") }
        guard Self.healthPingTimeoutRange.contains(healthPingTimeout) else {
            throw OutOfRange(limit: "healthPingTimeout")
        }
    }
}
