import Foundation
import Testing

/// Probes are not traffic: a balancer's and an orchestrator's probes every few seconds are
/// counted in `siwa_probe_answers_total`, apart from `siwa_requests_total` and the duration
/// histogram, and a probe writes a request line only when its answer changes (not every
/// period for as long as an instance is not ready). In process, on the status table's
/// fixture (a store double whose PING can fail, a real spool directory).
@Suite("Probe answers: counted apart, logged once per change")
struct ProbeAccountingTests {
    /// The /metrics lines that start with `prefix`.
    static func metricLines(_ table: ResponderStatusTableTests, _ prefix: String) -> [String] {
        table.request("GET", path: "/metrics").body.split(separator: "\n").map(String.init).filter {
            $0.hasPrefix(prefix)
        }
    }

    @Test("healthy, not ready, ready again: one line per change with the reasons, every answer counted apart")
    func probesCountedApartAndLoggedPerChange() throws {
        let table = try ResponderStatusTableTests()
        for _ in 0..<3 {
            #expect(table.request("GET", path: "/healthz/ready").status == 200)
            #expect(table.request("GET", path: "/healthz/live").status == 200)
            #expect(table.request("HEAD", path: "/healthz").status == 200)
        }
        #expect(table.logged.lines(event: "request") == [], "a healthy probe writes nothing")

        // Redis down and the spool unwritable: not ready, three periods in a row.
        table.store.answerPing(false)
        try FileManager.default.removeItem(atPath: table.spool.directory)
        for _ in 0..<3 {
            #expect(table.request("GET", path: "/healthz/ready").status == 503)
            #expect(table.request("GET", path: "/healthz").status == 503)
        }
        // The spool takes writes again (Redis still down): ready again, /healthz still not.
        try FileManager.default.createDirectory(atPath: table.spool.directory, withIntermediateDirectories: true)
        for _ in 0..<3 {
            #expect(table.request("GET", path: "/healthz/ready").status == 200)
            #expect(table.request("GET", path: "/healthz").status == 503)
        }

        let lines = table.logged.lines(event: "request")
        #expect(lines.count == 3, "\(lines)")
        let readyLines = lines.filter { $0.contains(#""path":"/healthz/ready""#) }
        #expect(readyLines.count == 2, "\(lines)")
        #expect(
            readyLines.first?.contains(
                #""status":503,"outcome":"unhealthy","#) == true
                && readyLines.first?.contains(
                    #""reasons":["redis_unreachable","spool_unwritable"],"previous_status":200,"#) == true,
            "\(readyLines)")
        #expect(
            readyLines.last?.contains(#""status":200,"outcome":"ready","#) == true
                && readyLines.last?.contains(#""previous_status":503,"#) == true, "\(readyLines)")
        let healthLines = lines.filter { $0.contains(#""path":"/healthz","#) }
        #expect(healthLines.count == 1, "\(lines)")
        #expect(
            healthLines.first?.contains(#""status":503,"outcome":"unhealthy","#) == true
                && healthLines.first?.contains(#""reason":"Redis does not answer","previous_status":200,"#) == true,
            "\(healthLines)")

        // Counted apart; none in the traffic's counter or its histogram.
        #expect(
            Self.metricLines(table, "siwa_probe_answers_total{") == [
                #"siwa_probe_answers_total{path="/healthz",status="200"} 3"#,
                #"siwa_probe_answers_total{path="/healthz",status="503"} 6"#,
                #"siwa_probe_answers_total{path="/healthz/live",status="200"} 3"#,
                #"siwa_probe_answers_total{path="/healthz/ready",status="200"} 6"#,
                #"siwa_probe_answers_total{path="/healthz/ready",status="503"} 3"#,
            ])
        // Only the scrapes themselves (/metrics is counted once answered).
        #expect(
            Self.metricLines(table, "siwa_requests_total{") == [
                #"siwa_requests_total{status="200",outcome="metrics",type="",code=""} 1"#
            ], "probes are not traffic")
        #expect(
            Self.metricLines(table, "siwa_request_duration_seconds_count") == ["siwa_request_duration_seconds_count 2"])

        // A probe path asked with another method is a request like any other.
        #expect(table.request("POST", path: "/healthz/ready").status == 405)
        #expect(
            Self.metricLines(table, "siwa_requests_total{") == [
                #"siwa_requests_total{status="200",outcome="metrics",type="",code=""} 3"#,
                #"siwa_requests_total{status="405",outcome="method_not_allowed",type="",code=""} 1"#,
            ])
    }
}
