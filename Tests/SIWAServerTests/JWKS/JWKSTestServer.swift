import Foundation
import SIWAHTTPS

/// A test CA plus a real nginx serving `/keys.json` under it, in one temp directory.
final class JWKSTestServer {
    let directory: URL
    let authority: TestCertificateAuthority
    let nginx: NginxProcess

    /// Locations every JWKS test can use: a redirect, a chunked copy of each file
    /// (sub_filter drops Content-Length), and a slow copy for timeouts and overlap.
    static let locations = """
        location = /moved { return 302 https://localhost:$HTTPS_PORT/keys.json; }
        location /chunked/ {
                    alias ROOT/;
                    sub_filter_types *;
                    sub_filter 'NO-SUCH-TEXT' 'x';
                    sub_filter_once off;
                }
        location /slow/ { alias ROOT/; limit_rate 600; }
        """

    init() throws {
        directory = try JWKSTestFixtures.temporaryDirectory()
        do {
            authority = try TestCertificateAuthority(in: directory)
            let root = directory.appendingPathComponent("www").path
            nginx = try NginxProcess.start(
                in: directory, certificatePath: authority.serverCertificatePath, keyPath: authority.serverKeyPath,
                extraLocations: Self.locations.replacingOccurrences(of: "ROOT", with: root))
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
    }

    var keysURL: String { "https://localhost:\(nginx.httpsPort)/keys.json" }

    var fetcher: HTTPSFetcher { HTTPSFetcher(caFilePath: authority.caCertificatePath) }

    func serve(_ bytes: [UInt8], at name: String = "keys.json") throws { try nginx.serve(bytes, at: name) }

    var keysRequestCount: Int { nginx.requestCount(path: "/keys.json") }

    /// Stops nginx and removes the directory; call it in a `defer`.
    func shutdown() {
        nginx.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
