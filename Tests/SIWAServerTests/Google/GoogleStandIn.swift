import Foundation
import SIWAHTTPS
import SIWAKeys
import SIWATestKit
import SIWAVerification

/// A stand-in of Google's side of Cross-Account Protection: its `risc-configuration`
/// document and JWKS served by a real nginx over TLS under a test CA (so the fetch is the
/// real HTTPS fetch), with keys that can be rotated, and a push client that signs SETs.
final class GoogleStandIn {
    let server: JWKSTestServer
    private(set) var keys: [TestSigningKey]

    init(keys: [TestSigningKey]) throws {
        server = try JWKSTestServer()
        self.keys = keys
        do {
            try publish(keys)
            try server.serve(
                Array(
                    TestSecurityEvent.configurationDocument(
                        jwksURI: "https://localhost:\(server.nginx.httpsPort)/keys.json"
                    )
                    .utf8),
                at: "risc-configuration")
        } catch {
            server.shutdown()
            throw error
        }
    }

    /// The URL of the configuration document (`SIWA_GOOGLE_RISC_CONFIGURATION_URL`).
    var configurationURL: String { "https://localhost:\(server.nginx.httpsPort)/risc-configuration" }

    /// The fetcher a provider uses: the real HTTPS fetch under the stand-in's CA.
    var fetcher: RISCDiscoveryFetcher { RISCDiscoveryFetcher(fetcher: server.fetcher) }

    /// Publishes `keys` as Google's JWKS (a rotation when they differ from the last ones).
    func publish(_ keys: [TestSigningKey]) throws {
        self.keys = keys
        try server.serve(Array(try TestSigningKey.jwksDocument(keys).utf8), at: "keys.json")
    }

    /// Replaces the configuration document with `text` (a broken one, an issuer changed).
    func serveConfiguration(_ text: String) throws { try server.serve(Array(text.utf8), at: "risc-configuration") }

    func shutdown() { server.shutdown() }
}
