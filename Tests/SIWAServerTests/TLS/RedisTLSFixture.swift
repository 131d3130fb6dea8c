import Foundation
import SIWARedis

/// The certificates of the TLS tests, made by the shared functions of
/// `scripts/lib/local-stack.sh`: a CA with a `localhost` server certificate (which also
/// serves as a client certificate for replication), a client certificate, an expired
/// server certificate and one for another name from the same CA, and a second CA the
/// endpoint does not trust with its own `localhost` certificate.
struct RedisTLSFixture {
    let directory: URL
    let authority: TestCertificateAuthority
    let otherAuthority: TestCertificateAuthority
    let client: (certificatePath: String, keyPath: String)
    let expired: (certificatePath: String, keyPath: String)
    let otherName: (certificatePath: String, keyPath: String)

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-redis-tls-\(UUID().uuidString)")
        let trusted = directory.appendingPathComponent("ca")
        let untrusted = directory.appendingPathComponent("other-ca")
        for folder in [trusted, untrusted] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        authority = try TestCertificateAuthority(in: trusted, serverUsage: "serverAuth,clientAuth")
        otherAuthority = try TestCertificateAuthority(in: untrusted)
        client = try authority.makeLeaf("client", usage: "clientAuth")
        expired = try authority.makeExpiredServerCertificate("expired")
        otherName = try authority.makeLeaf("other-name", san: "DNS:redis.other.example", usage: "serverAuth")
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }

    /// A TLS-only server with the trusted CA's `localhost` certificate.
    var goodServer: RedisServerProcess.TLSFiles {
        .init(
            certificatePath: authority.serverCertificatePath, keyPath: authority.serverKeyPath,
            caPath: authority.caCertificatePath)
    }

    /// The server certificates a client that trusts `authority` and connects to
    /// `localhost` must refuse, each with the reason OpenSSL gives.
    var refusedServers: [(name: String, files: RedisServerProcess.TLSFiles, reason: String, setting: String)] {
        let ca = authority.caCertificatePath
        return [
            (
                "signed by another CA",
                .init(
                    certificatePath: otherAuthority.serverCertificatePath, keyPath: otherAuthority.serverKeyPath,
                    caPath: ca), "unable to get local issuer certificate", "SIWA_REDIS_TLS_CA_FILE"
            ),
            (
                "expired", .init(certificatePath: expired.certificatePath, keyPath: expired.keyPath, caPath: ca),
                "certificate has expired", "SIWA_REDIS_TLS_CA_FILE"
            ),
            (
                "naming another host",
                .init(certificatePath: otherName.certificatePath, keyPath: otherName.keyPath, caPath: ca),
                "hostname mismatch", "SIWA_REDIS_URL"
            ),
        ]
    }

    /// What a client trusting the test CA uses.
    var clientTLS: RedisTLS { RedisTLS(caFile: authority.caCertificatePath) }
}
