import SIWAServer
import SIWAVerification
import Testing

/// JWKSProvider's rate limits in process: the fetch is an in-process double, the clock is
/// the test's. The same limits against a real HTTPS server are in `JWKSProviderTests`.
@Suite("JWKS provider rate limits (in process)")
struct JWKSProviderRateLimitTests {
    static let start: Int64 = 1_800_000_000

    static func provider(_ fetcher: JWKSFetcherDouble) -> JWKSProvider {
        JWKSProvider(
            settings: JWKSProvider.Settings(
                url: "https://jwks.invalid/auth/keys", refreshIntervalSeconds: 3600, failedRefreshRetrySeconds: 60,
                unknownKeyIDRefreshIntervalSeconds: 60),
            fetcher: fetcher, clock: { start })
    }

    @Test("scheduled refresh: not before the interval, then one fetch")
    func scheduledRefresh() throws {
        let fetcher = JWKSFetcherDouble()
        let known = try JWKSTestKey(kid: "known")
        fetcher.serve(try JWKSTestFixtures.document([known]))
        let provider = Self.provider(fetcher)
        #expect(provider.start() == .refreshed)
        #expect(fetcher.fetchCount == 1)
        #expect(provider.refreshIfDue(now: Self.start + 3599) == .skipped)
        #expect(fetcher.fetchCount == 1)
        #expect(provider.refreshIfDue(now: Self.start + 3600) == .refreshed)
        #expect(fetcher.fetchCount == 2)
        #expect(provider.refreshIfDue(now: Self.start + 3601) == .skipped)
        #expect(fetcher.fetchCount == 2)
    }

    @Test("after a failed fetch the scheduled refresh retries after the shorter interval; the keys stay")
    func failedRefreshRetry() throws {
        let fetcher = JWKSFetcherDouble()
        let known = try JWKSTestKey(kid: "known")
        fetcher.serve(try JWKSTestFixtures.document([known]))
        let provider = Self.provider(fetcher)
        provider.start()
        fetcher.serve(nil)
        #expect(provider.refreshIfDue(now: Self.start + 3600) == .failed)
        #expect(provider.keys.usableKeyIDs == ["known"])
        #expect(!provider.lastRefreshSucceeded)
        #expect(provider.refreshIfDue(now: Self.start + 3659) == .skipped)
        #expect(fetcher.fetchCount == 2)
        #expect(provider.refreshIfDue(now: Self.start + 3660) == .failed)
        #expect(fetcher.fetchCount == 3)
    }

    @Test("unknown-kid refresh: at most once per interval, counted from the last fetch of any kind")
    func unknownKeyIDRefresh() throws {
        let fetcher = JWKSFetcherDouble()
        let known = try JWKSTestKey(kid: "known")
        let stranger = try JWKSTestKey(kid: "stranger")
        fetcher.serve(try JWKSTestFixtures.document([known]))
        let provider = Self.provider(fetcher)
        provider.start()
        let verifier = JWKSTestFixtures.verifier
        func code(_ now: Int64) throws -> VerificationError.Code? {
            let body = try stranger.signedBody(issuedAt: now)
            do {
                _ = try verifier.verify(body: body, keys: provider, now: now)
                return nil
            } catch {
                return error.code
            }
        }

        // Within the interval of the start fetch: no fetch, so not known to be unknown: 503.
        #expect(try code(Self.start + 59) == .keysUnavailable)
        #expect(fetcher.fetchCount == 1)
        // After it: one fetch that still lacks the kid: 401.
        #expect(try code(Self.start + 60) == .kidUnknown)
        #expect(fetcher.fetchCount == 2)
        #expect(try code(Self.start + 119) == .keysUnavailable)
        #expect(fetcher.fetchCount == 2)
        // A failed fetch made for the request: 503, and it counts for the rate limit.
        fetcher.serve(nil)
        #expect(try code(Self.start + 120) == .keysUnavailable)
        #expect(fetcher.fetchCount == 3)
        #expect(provider.refreshForUnknownKeyID(now: Self.start + 179) == .skipped)
        // A scheduled refresh also counts: right after it, no unknown-kid fetch.
        fetcher.serve(try JWKSTestFixtures.document([known, stranger]))
        #expect(provider.refreshIfDue(now: Self.start + 180) == .refreshed)
        #expect(fetcher.fetchCount == 4)
        #expect(provider.refreshForUnknownKeyID(now: Self.start + 239) == .skipped)
        #expect(fetcher.fetchCount == 4)
        // The key the scheduled fetch brought now verifies without a fetch.
        #expect(try code(Self.start + 200) == nil)
        #expect(fetcher.fetchCount == 4)
    }
}
