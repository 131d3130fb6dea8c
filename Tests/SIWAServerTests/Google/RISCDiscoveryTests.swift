import Foundation
import SIWAKeys
import SIWATestKit
import SIWAVerification
import Testing

/// Google's keys and issuer through the discovery document, over real TLS: taken from the
/// document, kept when a later document is broken, and kept on disk for a restart.
@Suite("Google's discovery document")
final class RISCDiscoveryTests {
    let google: GoogleStandIn
    let key: TestSigningKey
    let directory: URL

    init() throws {
        key = try TestSigningKey.generate(keyID: "google-discovery-key")
        google = try GoogleStandIn(keys: [key])
        directory = try JWKSTestFixtures.temporaryDirectory()
    }

    deinit {
        google.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }

    func provider(url: String? = nil, cache: Bool = false) -> JWKSProvider {
        JWKSProvider(
            settings: JWKSProvider.Settings(
                url: url ?? google.configurationURL,
                cacheFilePath: cache ? directory.appendingPathComponent("google-risc.json").path : nil),
            fetcher: google.fetcher)
    }

    @Test("the issuer and the keys come from the document; a changed issuer is followed")
    func issuerFromTheDocument() throws {
        let keys = provider()
        #expect(keys.start() == .refreshed)
        #expect(keys.keys.issuer == TestSecurityEvent.issuer)
        #expect(keys.keys.usableKeyIDs == [key.keyID])
        try google.serveConfiguration(
            TestSecurityEvent.configurationDocument(
                issuer: "https://accounts.example.com/",
                jwksURI: "https://localhost:\(google.server.nginx.httpsPort)/keys.json"))
        #expect(keys.start() == .refreshed)
        #expect(keys.keys.issuer == "https://accounts.example.com/")
    }

    @Test(
        "a broken document (not JSON, no issuer, no jwks_uri, a jwks_uri without keys) keeps the held keys and issuer")
    func brokenDocumentKeepsTheKeys() throws {
        let keys = provider()
        #expect(keys.start() == .refreshed)
        let port = google.server.nginx.httpsPort
        let broken = [
            "not json",
            #"{"jwks_uri":"https://localhost:\#(port)/keys.json"}"#,
            #"{"issuer":"https://accounts.google.com/"}"#,
            #"{"issuer":"https://accounts.google.com/","jwks_uri":"https://localhost:\#(port)/risc-configuration"}"#,
        ]
        for (index, document) in broken.enumerated() {
            try google.serveConfiguration(document)
            #expect(keys.start() == .failed, "document \(index)")
            #expect(keys.keys.issuer == TestSecurityEvent.issuer, "document \(index)")
            #expect(keys.keys.usableKeyIDs == [key.keyID], "document \(index)")
        }
        #expect(keys.metrics(now: keys.now()).refreshFailures == broken.count)
    }

    @Test(
        "a jwks_uri over plain http to this machine is refused, though it serves keys: the held keys and issuer stay")
    func plainHTTPKeySetIsRefused() throws {
        let keys = provider()
        #expect(keys.start() == .refreshed)
        let planted = try TestSigningKey.generate(keyID: "planted-over-http")
        try google.server.serve(Array(try TestSigningKey.jwksDocument([planted]).utf8), at: "planted.json")
        try google.serveConfiguration(
            TestSecurityEvent.configurationDocument(
                issuer: "https://planted.example/",
                jwksURI: "http://localhost:\(google.server.nginx.httpPort)/planted.json"))
        #expect(keys.start() == .failed)
        #expect(keys.keys.issuer == TestSecurityEvent.issuer)
        #expect(keys.keys.usableKeyIDs == [key.keyID])
        #expect(google.server.nginx.requestCount(path: "/planted.json") == 0)
    }

    @Test("a document fetched over http from loopback may name a jwks_uri at its own origin (a local copy)")
    func localCopyNamesItsOwnOrigin() throws {
        let origin = "http://localhost:\(google.server.nginx.httpPort)"
        try google.serveConfiguration(
            TestSecurityEvent.configurationDocument(jwksURI: origin + "/keys.json"))
        let keys = provider(url: origin + "/risc-configuration")
        #expect(keys.start() == .refreshed)
        #expect(keys.keys.usableKeyIDs == [key.keyID])
    }

    @Test("a restart without network verifies with the cache file's keys and issuer")
    func cacheFileCarriesTheIssuer() throws {
        #expect(provider(cache: true).start() == .refreshed)
        let restarted = provider(url: "https://localhost:1/risc-configuration", cache: true)
        #expect(restarted.start() == .failed)
        #expect(restarted.keys.issuer == TestSecurityEvent.issuer)
        let token = try TestSecurityEvent.token(
            .sessionsRevoked, clientID: "1-a.apps.googleusercontent.com", sub: "1", issuedAt: restarted.now(),
            tokenID: "cached-1", key: key)
        let verified = try SecurityEventVerifier(clientIDs: ["1-a.apps.googleusercontent.com"])
            .verify(token: Array(token.utf8), keys: restarted, issuer: restarted.keys.issuer, now: restarted.now())
        #expect(verified.tokenID == "cached-1")
    }
}
