import Foundation
import SIWAFastCGI
import SIWAFastCGIClient
import SIWAKeys
import SIWARedis
import SIWASpool
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWATestKit
import Synchronization
import Testing

/// Every thread serve starts is owned by a service of its group: after a stop, each
/// service's `run()` has returned. Here the services serve runs, built from real parts: a
/// FastCGI server on a unix socket, a spool in a temporary directory, hiredis connections
/// to a Redis socket where nothing listens (so the breaker is open and probing, the
/// replayer waiting, the deletion reader failing, all at the moment of the stop), and the
/// JWKS refresher, which runs an unknown kid's fetch on its own thread (an in-process
/// stand-in for Apple's JWKS host, which a test cannot reach).
@Suite("serve's services stop")
struct ServeServicesStopTests {
    @Test(
        "the JWKS refresher (an unknown kid's fetch on its thread), the breaker (probing), the replayer, the deletion reader and the FastCGI server all return on a stop"
    )
    func everyServiceReturnsOnStop() throws {
        try withSpoolDirectory { directory in
            let nowhere = RedisEndpoint(address: .unixSocket(path: directory + "/no-redis.sock"))
            func connection() -> RedisConnection {
                RedisConnection(
                    endpoint: nowhere, connectTimeout: .milliseconds(200), commandTimeout: .milliseconds(200))
            }
            let breakerStore = Mutex(NotificationStore(connection: connection()))
            let breaker = RedisCircuitBreaker(retryInterval: .milliseconds(50)) {
                breakerStore.withLock { $0.probe() }
            }
            let spool = try NotificationSpool(directory: directory)
            try spool.append(spoolNotification(1))
            let replayer = SpoolReplayer(
                spool: spool, rejected: try SpoolSetAsideStore(spoolDirectory: directory),
                store: NotificationStore(connection: connection()), metrics: ServerMetrics(),
                clientIDs: ["com.example.app0"], clock: .system)
            let deletions = DeletionDutyMonitor(
                connection: connection(), key: "siwa:deletions", interval: .milliseconds(50), clock: .system)
            let socket = directory + "/fcgi.sock"
            let server = try FastCGIServer(
                configuration: .init(address: .unixSocket(path: socket), workerCount: 2, shutdownTimeout: .seconds(10)),
                handler: { _ in FastCGIResponse(status: 200, contentType: "text/plain", body: "ok") })

            let fetcher = HeldJWKSFetcher(
                document: try JWKSTestFixtures.document([TestSigningKey.generate(keyID: "known")]))
            let keys = JWKSProvider(
                settings: JWKSProvider.Settings(
                    url: "https://jwks.invalid/auth/keys", unknownKeyIDRefreshInterval: .zero,
                    unknownKeyIDWaitLimit: .seconds(30), unknownKeyIDWaiters: 1),
                fetcher: fetcher)
            // No key at its start: the refresher's first step fetches, on its own thread.
            let refresher = JWKSRefresher(provider: keys)

            let group = ServiceGroup()
            group.start(refresher)
            group.start(breaker)
            try group.start(server)
            group.start(replayer)
            group.start(deletions)
            // The breaker opens, and its probe runs on the service thread.
            breaker.recordFailure(RedisError(.connectionFailed, "no Redis"))
            #expect(breaker.isOpen)
            #expect(
                waitUntil(seconds: 10) { breaker.health(within: .milliseconds(80)).lastProbe != nil },
                "the probe ran on the breaker's thread")
            // A request goes through: the server is serving.
            let response = try FastCGIClient(.unixSocket(socket)).send(
                params: FastCGIClient.params(method: "GET", uri: "/"))
            #expect(response.status == 200)
            // An unknown kid's fetch runs on the refresher's thread, which the group stops,
            // never on a thread of its own.
            #expect(waitUntil(seconds: 10) { keys.usableKeyCount == 1 }, "the refresher's first fetch")
            #expect(keys.refreshForUnknownKey() == .refreshed)
            let threads = fetcher.fetchThreads
            #expect(threads.count == 2)
            #expect(threads.count == 2 && threads[1] == threads[0], "the unknown kid's fetch ran on another thread")
            #expect(threads.last != pthread_self())

            let started = ContinuousClock.now
            #expect(group.stop(until: started + .seconds(10)), "a service's run() did not return")
            #expect(ContinuousClock.now - started < .seconds(5))
            #expect(server.hasDrained)
            #expect(!FileManager.default.fileExists(atPath: socket))
            #expect(spool.depth == 1, "the record waits for the next start")
        }
    }

    /// Polls `condition` every 10 ms until it holds or `seconds` have passed.
    private func waitUntil(seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            if condition() { return true }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return condition()
    }
}
