import Foundation
import Glibc
import SIWAFastCGIClient
import SIWATestKit
import Testing

@testable import SIWAFastCGI

/// A peer that connects and sends one byte, then nothing, must not hold a worker: libfcgi
/// reads the request header inside its accept, without a timeout, so the acceptor hands a
/// worker only connections whose request is already waiting.
@Suite("FastCGI: silent peers hold no worker")
struct FastCGISilentPeerTests {
    typealias Kit = FastCGITestKit

    /// Opens `count` connections to `path` that each send one byte of a FastCGI header.
    static func silentPeers(_ path: String, count: Int) throws -> [FastCGIClient.Connection] {
        try (0..<count).map { _ in
            let connection = try FastCGIClient(.unixSocket(path), timeout: .seconds(30)).connect()
            try connection.writeAll([1])
            return connection
        }
    }

    @Test("six one-byte peers, four workers: requests are still answered, and stop() drains at once")
    func silentPeersDoNotBlockWorkers() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/silent.sock"
        let server = try FastCGIServer(
            configuration: .init(address: .unixSocket(path: path), workerCount: 4, ioTimeout: .seconds(30)),
            handler: { _ in FastCGIResponse(status: 200, contentType: "text/plain", body: "ok") })
        try server.start()
        let peers = try Self.silentPeers(path, count: 6)
        defer { peers.forEach { $0.close() } }
        // More requests than workers, each on its own connection, after the silent ones.
        for _ in 0..<8 {
            let response = try FastCGIClient(.unixSocket(path), timeout: .seconds(20)).send(
                params: FastCGIClient.params(method: "GET", uri: "/healthz"))
            #expect(response.status == 200)
        }
        // Stopping does not wait on them either: no worker holds one.
        #expect(server.stop(timeout: .seconds(10)))
        // They were closed, without an answer.
        for peer in peers { #expect((try? peer.readToEnd()) ?? [] == []) }
    }

    @Test("a request that arrives in pieces is served once it is whole")
    func requestInPieces() throws {
        try Kit.withServer(
            workerCount: 1,
            handler: { request in FastCGIResponse(status: 200, contentType: "text/plain", body: request.queryString) }
        ) { _, client, _ in
            let connection = try client.connect()
            defer { connection.close() }
            var bytes: [UInt8] = []
            FastCGIClient.appendRecord(&bytes, type: 1, requestID: 1, content: [0, 1, 0, 0, 0, 0, 0, 0])
            let params = FastCGIClient.params(method: "GET", uri: "/?pieces").reduce(into: [UInt8]()) { out, pair in
                FastCGIClient.appendLength(&out, pair.0.utf8.count)
                FastCGIClient.appendLength(&out, pair.1.utf8.count)
                out += Array(pair.0.utf8) + Array(pair.1.utf8)
            }
            FastCGIClient.appendStream(&bytes, type: 4, requestID: 1, content: params)
            FastCGIClient.appendStream(&bytes, type: 5, requestID: 1, content: [])
            let middle = bytes.count / 2
            try connection.writeAll(Array(bytes[..<middle]))
            usleep(100_000)  // a pause inside the request; the rest follows
            try connection.writeAll(Array(bytes[middle...]))
            let text = String(decoding: try connection.readToEnd(), as: UTF8.self)
            #expect(text.contains("\r\n\r\npieces"))
        }
    }

    @Test("a peer that stays silent past the timeout is closed")
    func silentPeerIsClosedAtTheDeadline() throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/deadline.sock"
        let server = try FastCGIServer(
            configuration: .init(address: .unixSocket(path: path), workerCount: 1, ioTimeout: .seconds(1)),
            handler: { _ in FastCGIResponse(status: 200) })
        try server.start()
        defer { server.stop(timeout: .seconds(10)) }
        let peer = try Self.silentPeers(path, count: 1)[0]
        defer { peer.close() }
        // The server closes it (EOF, or a reset since its byte was never read), well before
        // the client's own 30 s timeout would end the read.
        let start = ContinuousClock.now
        let answer = try? peer.readToEnd()
        #expect(answer == nil || answer == [])
        #expect(ContinuousClock.now - start < .seconds(25), "closed by the server, not by the client's timeout")
    }
}
