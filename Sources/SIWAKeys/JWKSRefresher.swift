import SIWAJSON
import SIWASupport
import SIWATelemetry

/// The service that keeps the JWKS schedule without a request: it calls `refreshIfDue` on
/// a short tick (hourly, or the retry interval after a failure, decided by the provider on
/// its monotonic clock). It also runs the fetch an unknown kid asks for, on its own thread,
/// woken at once: it runs the provider's `JWKSFetchQueue` from its `start()` to the end of
/// its `run()`. Run it in a `ServiceGroup`.
public final class JWKSRefresher: Service {
    public let provider: JWKSProvider
    /// How often the service asks whether a refresh is due.
    public let checkInterval: Duration
    /// The service's name: "jwks-refresher" for Apple's keys (as it always was), another for
    /// another provider's, so that the services' lines tell the two apart.
    public let name: String
    /// The provider named in this refresher's log lines (nil: none, as Apple's lines have
    /// always been written, so that what reads them is unchanged).
    public let identityProvider: String?
    /// The unknown kids' fetches it runs: the provider's queue (its loop is this service's).
    public let fetchQueue: JWKSFetchQueue
    private var task: PeriodicTask { fetchQueue.loop }

    /// Whether `start()` loads the keys (serve's refresher; a caller that started the
    /// provider itself passes false).
    public let loadsKeysAtStart: Bool

    /// `fetchQueue` is the provider's (given to both where they are built; by default the
    /// provider's own).
    public init(
        provider: JWKSProvider, fetchQueue: JWKSFetchQueue? = nil, checkInterval: Duration = .seconds(15),
        loadsKeysAtStart: Bool = false, name: String = "jwks-refresher", identityProvider: String? = nil
    ) {
        precondition(fetchQueue.map { $0 === provider.fetchQueue } ?? true, "the provider's own fetch queue")
        self.provider = provider
        self.fetchQueue = fetchQueue ?? provider.fetchQueue
        self.checkInterval = checkInterval
        self.loadsKeysAtStart = loadsKeysAtStart
        self.name = name
        self.identityProvider = identityProvider
    }

    /// Before the next service starts (with `loadsKeysAtStart`): the cache file, then one
    /// fetch (bounded by the fetcher's timeout), and one `jwks_loaded` line saying what is held.
    public func start() {
        // From here on an unknown kid's fetch runs on this service's thread (nudged).
        fetchQueue.open()
        guard loadsKeysAtStart else { return }
        let outcome = provider.start()
        let held = provider.metrics(now: provider.clock.wallSeconds())
        EventLog.event(
            "jwks_loaded", level: held.usableKeyCount > 0 ? "info" : "error",
            loadedFields(
                fetch: "\(outcome)", keys: held.usableKeyCount, lastFailure: held.lastFailure?.description))
    }

    /// The `jwks_loaded` line's fields: Apple's as they always were, another provider's
    /// with `provider` last.
    func loadedFields(fetch: String, keys: Int, lastFailure: String?) -> [(String, JSONValue)] {
        [
            ("fetch", .string(fetch)), ("keys", .integer(Int64(keys))),
            ("last_failure", lastFailure.map { .string($0) } ?? .null),
        ] + (identityProvider.map { [("provider", .string($0))] } ?? [])
    }

    /// While no usable key is held, a fetch is retried after 1 s, then 2, 4, ... up to the
    /// unknown-kid interval (a boot where the network comes up late must not leave every
    /// notification at 503 for a whole retry interval); with keys, the schedule is checked
    /// every `checkInterval`.
    public func run() {
        let longestBackoff = max(.seconds(1), provider.settings.unknownKeyIDRefreshInterval)
        var backoff = Duration.seconds(1)
        task.run {
            fetchQueue.runPending()
            if provider.usableKeyCount == 0 {
                provider.refreshIfEmpty()
            } else {
                provider.refreshIfDue()
            }
            guard provider.usableKeyCount == 0 else {
                backoff = .seconds(1)
                return checkInterval
            }
            defer { backoff = min(backoff * 2, longestBackoff) }
            return backoff
        }
        fetchQueue.close()
    }

    /// Ends `run()` after the fetch in progress, if any (bounded by the fetcher's timeout).
    public func requestStop() { task.requestStop() }
}
