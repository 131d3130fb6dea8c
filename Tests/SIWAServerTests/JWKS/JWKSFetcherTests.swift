import CCurl
import Foundation
import SIWAHTTPS
import SIWATestKit
import Testing

/// HTTPSFetcher against a real nginx under a test CA.
@Suite("JWKS HTTPS fetcher")
struct JWKSFetcherTests {
    private static func expectFailure(
        _ code: HTTPSFetchError.Code, httpStatus: Int? = nil, sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () throws(HTTPSFetchError) -> [UInt8]
    ) {
        do {
            let bytes = try body()
            Issue.record("expected \(code), got \(bytes.count) bytes", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
            #expect(error.httpStatus == httpStatus, sourceLocation: sourceLocation)
        }
    }

    @Test func fetchSucceedsWhenTheCAFileTrustsTheServer() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let document = try JWKSTestFixtures.document([TestSigningKey.generate(keyID: "k1")])
        try server.serve(document)
        #expect(try server.fetcher.fetch(server.keysURL) == document)
        #expect(server.keysRequestCount == 1)
    }

    @Test func fetchFailsWhenTheServerIsNotTrusted() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        try server.serve(Array("{}".utf8))
        // The system store does not hold the test CA.
        Self.expectFailure(.tlsVerificationFailed) { () throws(HTTPSFetchError) in
            try HTTPSFetcher().fetch(server.keysURL)
        }
        #expect(server.keysRequestCount == 0)
    }

    @Test func fetchFailsWhenTheCertificateNamesAnotherHost() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        try server.serve(Array("{}".utf8))
        // The certificate names only localhost; 127.0.0.1 is the same server under another name.
        Self.expectFailure(.tlsVerificationFailed) { () throws(HTTPSFetchError) in
            try server.fetcher.fetch("https://127.0.0.1:\(server.nginx.httpsPort)/keys.json")
        }
        #expect(server.keysRequestCount == 0)
    }

    @Test func fetchFailsWhenTheCAFileIsMissing() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let fetcher = HTTPSFetcher(caFilePath: server.directory.appendingPathComponent("absent.pem").path)
        Self.expectFailure(.caFileUnusable) { () throws(HTTPSFetchError) in try fetcher.fetch(server.keysURL) }
    }

    @Test func plainHTTPToLoopbackIsAllowed() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let document = Array(#"{"keys":[]}"#.utf8)
        try server.serve(document)
        #expect(try HTTPSFetcher().fetch("http://127.0.0.1:\(server.nginx.httpPort)/keys.json") == document)
        #expect(try HTTPSFetcher().fetch("http://localhost:\(server.nginx.httpPort)/keys.json") == document)
        #expect(server.keysRequestCount == 2)
    }

    @Test func plainHTTPToAnotherHostIsRefusedBeforeAnyTraffic() {
        // 192.0.2.1 (TEST-NET-1) never answers: a connection attempt would run into
        // the 30 s timeout, so a refusal well before it shows nothing was sent. The
        // bound (10 s) is a third of the timeout: generous for a loaded 2-core machine.
        let fetcher = HTTPSFetcher(timeoutSeconds: 30)
        for url in [
            "http://192.0.2.1/keys.json", "http://appleid.apple.com/auth/keys", "http://128.0.0.1/keys.json",
            "ftp://192.0.2.1/keys.json", "file:///etc/hostname", "gopher://127.0.0.1/x",
        ] {
            let started = Date()
            Self.expectFailure(.schemeNotAllowed) { () throws(HTTPSFetchError) in try fetcher.fetch(url) }
            #expect(Date().timeIntervalSince(started) < 10, "\(url) took too long")
        }
        Self.expectFailure(.urlInvalid) { () throws(HTTPSFetchError) in try fetcher.fetch("not a url at all") }
    }

    @Test func loopbackHostsAreRecognisedStrictly() {
        for host in ["localhost", "LOCALHOST", "127.0.0.1", "127.255.255.254", "[::1]"] {
            #expect(HTTPSFetcher.isLoopbackHost(host), "\(host)")
        }
        for host in [
            "128.0.0.1", "10.0.0.1", "localhost.example.com", "127.0.0", "127.0.0.1.1", "127.0.0.256",
            "0x7f.0.0.1", "[::2]", "", "evil-localhost",
        ] {
            #expect(!HTTPSFetcher.isLoopbackHost(host), "\(host)")
        }
    }

    @Test func bodyOverTheCapIsRefused() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        let limit = HTTPSFetcher.defaultMaximumBytes
        try server.serve([UInt8](repeating: 0x20, count: limit), at: "exact.json")
        try server.serve([UInt8](repeating: 0x20, count: limit + 1), at: "over.json")
        let base = "https://localhost:\(server.nginx.httpsPort)"
        // With Content-Length (refused before the body) and chunked (refused by the write cap).
        #expect(try server.fetcher.fetch("\(base)/exact.json").count == limit)
        #expect(try server.fetcher.fetch("\(base)/chunked/exact.json").count == limit)
        Self.expectFailure(.responseTooLarge) { () throws(HTTPSFetchError) in
            try server.fetcher.fetch("\(base)/over.json")
        }
        Self.expectFailure(.responseTooLarge) { () throws(HTTPSFetchError) in
            try server.fetcher.fetch("\(base)/chunked/over.json")
        }
    }

    @Test func notFoundIsRefused() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        Self.expectFailure(.httpStatusNotOK, httpStatus: 404) { () throws(HTTPSFetchError) in
            try server.fetcher.fetch(server.keysURL)
        }
        #expect(server.keysRequestCount == 1)
    }

    @Test func redirectIsNotFollowed() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        try server.serve(Array(#"{"keys":[]}"#.utf8))
        Self.expectFailure(.httpStatusNotOK, httpStatus: 302) { () throws(HTTPSFetchError) in
            try server.fetcher.fetch("https://localhost:\(server.nginx.httpsPort)/moved")
        }
        #expect(server.nginx.requestCount(path: "/moved") == 1)
        #expect(server.keysRequestCount == 0)
    }

    @Test func slowTransferTimesOut() throws {
        let server = try JWKSTestServer()
        defer { server.shutdown() }
        // 600 bytes a second: 20 kB would take half a minute.
        try server.serve([UInt8](repeating: 0x20, count: 20_000))
        let fetcher = HTTPSFetcher(caFilePath: server.authority.caCertificatePath, timeoutSeconds: 1)
        let started = Date()
        Self.expectFailure(.timedOut) { () throws(HTTPSFetchError) in
            try fetcher.fetch("https://localhost:\(server.nginx.httpsPort)/slow/keys.json")
        }
        // The whole transfer would take about 33 s; the 1 s timeout must end it long before.
        // The bound is generous (a loaded machine may be slow to notice) yet far below 33 s.
        #expect(Date().timeIntervalSince(started) < 15)
    }

    @Test func connectionRefusedIsReported() throws {
        let server = try JWKSTestServer()
        let url = server.keysURL
        let fetcher = server.fetcher
        server.shutdown()
        Self.expectFailure(.connectFailed) { () throws(HTTPSFetchError) in try fetcher.fetch(url) }
        // The cause is kept as libcurl gave it, not only as text.
        do {
            _ = try fetcher.fetch(url)
        } catch {
            #expect(error.curlCode == CURLE_COULDNT_CONNECT.rawValue, "\(error)")
        }
    }
}
