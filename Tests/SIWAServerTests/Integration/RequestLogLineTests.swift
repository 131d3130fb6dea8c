import Foundation
import Testing

/// The request log line, written byte by byte on the request path: its exact shape,
/// member order and time format, as operators' log pipelines read it.
@Suite("Request log line", .serialized)
struct RequestLogLineTests {
    @Test("one line per request: time in UTC with milliseconds, then the fields in their documented order")
    func requestLine() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let before = Date()
        let response = try stack.post(
            try stack.body(type: "consent-revoked", sub: "000009.log.0001"), requestID: "log-line-check")
        #expect(response.status == 200)
        let lines = try #require(stack.serve?.logLines(event: "request")).filter {
            $0.contains(#""request_id":"log-line-check""#)
        }
        #expect(lines.count == 1)
        let line = try #require(lines.first)
        let pattern =
            #"^\{"time":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z","level":"info","event":"request","#
            + #""request_id":"log-line-check","method":"POST","path":"/apple/notifications","status":200,"#
            + #""outcome":"applied","type":"consent-revoked","client_id":"\#(ServeStack.clientID)","#
            + #""duration_ms":[0-9.e-]+\}$"#
        let match = try #require(line.wholeMatch(of: try Regex(pattern)), "\(line)")
        let time = try #require(match.output[1].substring.map(String.init))
        let parsed = try #require(
            try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(time + "Z"))
        #expect(abs(parsed.timeIntervalSince(before)) < 60)
    }
}
