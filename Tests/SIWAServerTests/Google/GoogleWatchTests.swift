import Foundation
import SIWAJSON
import SIWASettings
import SIWATelemetry
import SIWATestSupport
import SIWAVerification
import Testing

@testable import SIWAKeys
@testable import SIWAResponder
@testable import siwa_endpoint

/// Watching Google's side as Apple's is watched: the /metrics families the alert rules
/// (deploy/prometheus) read, and the keys' refresher named apart from Apple's.
@Suite("Google's side watched: its metrics and its keys' refresher")
struct GoogleWatchTests {
    static let clientID = "1234567890-abc.apps.googleusercontent.com"
    static let otherClientID = "555-other.apps.googleusercontent.com"

    static func configuration(_ extra: [String: String] = [:]) throws -> ServerConfiguration {
        try ServerConfiguration(
            environment: [
                "SIWA_CLIENT_IDS": "com.example.app",
                "SIWA_GOOGLE_CLIENT_IDS": "\(clientID),\(otherClientID)",
                "SIWA_GOOGLE_RISC_CONFIGURATION_URL": "https://risc.invalid/.well-known/risc-configuration",
            ].merging(extra) { _, extra in extra })
    }

    /// The metric families of a /metrics text whose samples are not each preceded by their
    /// family's HELP and TYPE lines.
    static func familiesWithoutHelpOrType(_ text: String) -> [String] {
        var described: [String: Set<String>] = [:]
        var missing: [String] = []
        for line in text.split(separator: "\n") {
            let words = line.split(separator: " ", maxSplits: 3)
            if words.count >= 3, words[0] == "#", words[1] == "HELP" || words[1] == "TYPE" {
                described[String(words[2]), default: []].insert(String(words[1]))
                continue
            }
            let name = String(line.prefix { $0 != "{" && $0 != " " })
            if described[name] != ["HELP", "TYPE"] { missing.append(name) }
        }
        return missing
    }

    @Test("Google's silence per client ID: seconds since it was first served, then since its last genuine token")
    func silenceFigures() throws {
        let configuration = try Self.configuration()
        let startedAt: Int64 = 1_800_000_000_000
        let receiver = SecurityEventReceiver(
            settings: configuration.google,
            verifier: SecurityEventVerifier(clientIDs: configuration.google.clientIDs, leewaySeconds: 60),
            keys: JWKSProvider(settings: configuration.google.keys, fetcher: JWKSFetcherDouble()), startedAt: startedAt)
        let tenDays: Int64 = 864_000_000
        var text = ServerMetrics.renderGoogleClients(receiver, now: startedAt + tenDays)
        #expect(text.contains("siwa_google_client_silence_seconds{client_id=\"\(Self.clientID)\"} 864000.0\n"))
        #expect(text.contains("siwa_google_client_silence_seconds{client_id=\"\(Self.otherClientID)\"} 864000.0\n"))
        // A genuine token for one client ID: its silence starts again; the other's goes on.
        _ = receiver.traffic.recordGenuine(clientID: Self.clientID, at: startedAt + tenDays - 90_000)
        text = ServerMetrics.renderGoogleClients(receiver, now: startedAt + tenDays)
        #expect(text.contains("siwa_google_client_silence_seconds{client_id=\"\(Self.clientID)\"} 90.0\n"))
        #expect(text.contains("siwa_google_client_silence_seconds{client_id=\"\(Self.otherClientID)\"} 864000.0\n"))
        // Every family the rules read has its HELP and TYPE lines (Prometheus takes a family
        // without them as untyped, and promtool's rule tests cannot see that).
        #expect(Self.familiesWithoutHelpOrType(text) == [])
        let families = Set(
            text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { $0.prefix { $0 != "{" && $0 != " " } })
        #expect(
            families == [
                "siwa_google_client_events_total", "siwa_google_client_silence_seconds",
                "siwa_google_client_refusals_total", "siwa_google_keys", "siwa_google_keys_refresh_failures_total",
            ])
    }

    @Test("a family without HELP or TYPE is found")
    func helpAndTypeCheckFails() {
        #expect(
            Self.familiesWithoutHelpOrType(
                "# HELP a_total A.\n# TYPE a_total counter\na_total 1\nb 2\n# TYPE c gauge\nc 3\n")
                == ["b", "c"])
    }

    @Test("Google's keys have a refresher named apart from Apple's, whose lines name the provider")
    func refresherNames() throws {
        let redis = try RedisServerProcess()
        defer { redis.shutdown() }
        let directory = try JWKSTestFixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let configuration = try Self.configuration([
            "SIWA_REDIS_URL": redis.url(), "SIWA_SPOOL_DIR": directory.appendingPathComponent("spool").path,
            "SIWA_JWKS_CACHE": directory.appendingPathComponent("jwks.json").path,
            "SIWA_FCGI_SOCKET": directory.appendingPathComponent("fcgi.sock").path,
        ])
        guard case .success(let redisAtStart) = ServeCommand.startChecks(configuration, readingSpool: false) else {
            Issue.record("serve's start-up checks refused the settings")
            return
        }
        // Built, not started: nothing is fetched.
        let assembly = try ServeAssembly.build(configuration, redisAtStart: redisAtStart)
        #expect(assembly.jwksRefresher.name == "jwks-refresher")
        #expect(assembly.jwksRefresher.identityProvider == nil)
        let google = try #require(assembly.googleKeysRefresher)
        #expect(google.name == "google-keys-refresher")
        #expect(google.identityProvider == "google")
        #expect(google.provider !== assembly.jwksRefresher.provider)
        // The jwks_loaded line: Apple's fields as they were, Google's with the provider named.
        let apple = assembly.jwksRefresher.loadedFields(fetch: "fetched", keys: 3, lastFailure: nil)
        #expect(apple.map(\.0) == ["fetch", "keys", "last_failure"])
        let googleFields = google.loadedFields(fetch: "fetched", keys: 2, lastFailure: nil)
        #expect(googleFields.map(\.0) == ["fetch", "keys", "last_failure", "provider"])
        #expect(googleFields.last?.1 == .string("google"))
    }
}
