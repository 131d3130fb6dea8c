import Foundation
import Testing

/// The request log line, written byte by byte on the request path: its exact shape,
/// member order and time format, as operators' log pipelines read it. Read in process from
/// the responder's log sink (the responder of the status table's fixture, a store double
/// answering `applied`).
@Suite("Request log line")
struct RequestLogLineTests {
    @Test("one line per request: time in UTC with milliseconds, then the fields in their documented order")
    func requestLine() throws {
        let table = try ResponderStatusTableTests()
        let before = Date()
        let response = table.request(body: .complete(try table.signed()), params: ["REQUEST_ID": "log-line-check"])
        #expect(response.status == 200)
        let lines = table.logged.lines(event: "request")
        #expect(lines.count == 1, "\(table.logged.all)")
        let line = try #require(lines.first)
        let pattern =
            #"^\{"time":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z","level":"info","event":"request","#
            + #""request_id":"log-line-check","method":"POST","path":"/apple/notifications","status":200,"#
            + #""outcome":"applied","type":"consent-revoked","client_id":"\#(JWKSTestFixtures.clientID)","#
            + #""duration_ms":[0-9.e-]+\}\n$"#
        let match = try #require(line.wholeMatch(of: try Regex(pattern)), "\(line)")
        let time = try #require(match.output[1].substring.map(String.init))
        let parsed = try #require(
            try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(time + "Z"))
        // The line's time is the wall clock's (not the fixture's): written now.
        #expect(abs(parsed.timeIntervalSince(before)) < 60)
    }
}
