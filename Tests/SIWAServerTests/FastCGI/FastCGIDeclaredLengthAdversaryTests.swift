import SIWAFastCGIClient
import Testing

@testable import SIWAFastCGI

private typealias Kit = FastCGITestKit

/// A peer lying about `CONTENT_LENGTH` to the body read that goes straight into storage of
/// the declared length: each body the handler sees is exactly what was sent, or named
/// incomplete; nothing of one request's bytes reaches the next on the same worker.
@Suite("FastCGI declared lengths against an adversary")
struct FastCGIDeclaredLengthAdversaryTests {
    private static func params(length: String) -> [(String, String)] {
        FastCGIClient.params(method: "POST", uri: "/", body: []).filter { $0.0 != "CONTENT_LENGTH" }
            + [("CONTENT_LENGTH", length)]
    }

    @Test("on one kept connection and one worker, a short body after a long one is exactly itself")
    func storageIsNotShared() throws {
        let bodies = Kit.LockedBox<[FastCGIRequest.Body]>([])
        try Kit.withServer(workerCount: 1, maximumBodyBytes: 4096) { request in
            bodies.withValue { $0.append(request.body) }
            if case .complete = request.body { return FastCGIResponse(status: 200) }
            return FastCGIResponse(status: 400)
        } _: { _, client, _ in
            let connection = try client.connect()
            defer { connection.close() }
            let long = [UInt8](repeating: UInt8(ascii: "A"), count: 4096)
            let short = Array("BBBBB".utf8)
            for (length, body) in [("4096", long), ("5", short), ("0000000005", short), ("0", [])] {
                let response = try connection.send(
                    params: Self.params(length: length), body: body, keepConnection: true)
                #expect(response.status == 200, "CONTENT_LENGTH \(length)")
            }
        }
        #expect(
            bodies.current == [
                .complete([UInt8](repeating: UInt8(ascii: "A"), count: 4096)), .complete(Array("BBBBB".utf8)),
                .complete(Array("BBBBB".utf8)), .complete([]),
            ])
    }

    @Test("a body one byte longer or shorter than declared, or declared 0 with bytes, is incomplete")
    func offByOne() throws {
        let bodies = Kit.LockedBox<[FastCGIRequest.Body]>([])
        try Kit.withServer(workerCount: 1, maximumBodyBytes: 4096) { request in
            bodies.withValue { $0.append(request.body) }
            if case .complete = request.body { return FastCGIResponse(status: 200) }
            return FastCGIResponse(status: 400)
        } _: { _, client, _ in
            let cases: [(String, [UInt8])] = [
                ("5", Array("123456".utf8)), ("5", Array("1234".utf8)), ("0", [0x00]),
                ("4096", [UInt8](repeating: 1, count: 4095)),
                ("4095", [UInt8](repeating: 1, count: 4096)),
            ]
            for (length, body) in cases {
                let response = try client.send(params: Self.params(length: length), body: body)
                #expect(response.status == 400, "CONTENT_LENGTH \(length), \(body.count) bytes")
            }
        }
        #expect(bodies.current == [.incomplete, .incomplete, .incomplete, .incomplete, .incomplete])
    }
}
