import SIWAJSON
import SIWASupport
import SIWATelemetry
import Synchronization
import Testing

/// `redis_primary_unconfirmed` through an outage: the sentinels are asked twice a second, and
/// each answer naming the unreachable primary used to be a log line.
@Suite("A repeated warning: once, then a summary")
struct RepeatedEventLogTests {
    /// The lines written, and a clock the test moves.
    final class Recorder: Sendable {
        let lines = Mutex<[(event: String, level: String, fields: [(String, JSONValue)])]>([])
        let elapsed = Mutex<Duration>(.zero)
        let start = ContinuousClock.now
        /// 2026-12-04T10:00:00.250Z
        let wallStart: Int64 = 1_796_378_400_250

        var clock: EndpointClock {
            EndpointClock(
                monotonic: { self.start + self.elapsed.withLock { $0 } },
                wallMilliseconds: {
                    self.wallStart + Int64(self.elapsed.withLock { $0 }.components.seconds) * 1000
                })
        }

        func log(summaryInterval: Duration = .seconds(30)) -> RepeatedEventLog {
            RepeatedEventLog(
                event: "redis_primary_unconfirmed", summaryInterval: summaryInterval, clock: clock,
                write: { event, level, fields in self.lines.withLock { $0.append((event, level, fields)) } })
        }

        func advance(_ duration: Duration) { elapsed.withLock { $0 += duration } }

        /// Each line's `repeats` (nil on the line that starts a condition) and `named`.
        var written: [(repeats: Int64?, named: String?)] {
            lines.withLock { lines in
                lines.map { line in
                    let fields = Dictionary(line.fields, uniquingKeysWith: { first, _ in first })
                    var repeats: Int64?
                    if case .integer(let count)? = fields["repeats"] { repeats = count }
                    var named: String?
                    if case .string(let address)? = fields["named"] { named = address }
                    return (repeats, named)
                }
            }
        }
    }

    static func fields(_ named: String) -> [(String, JSONValue)] {
        [
            ("sentinel", .string("127.0.0.1:26379")), ("named", .string(named)),
            ("message", .string("timed out after 500 ms")),
        ]
    }

    @Test("an outage of 70 s asked twice a second: one line, a summary every 30 s, one at the end")
    func outageIsLoggedOnceThenSummarised() {
        let recorder = Recorder()
        let log = recorder.log()
        // 140 discoveries, 0.5 s apart: the first at 0 s, the last at 69.5 s.
        for _ in 0..<140 {
            log.record(key: "10.0.0.1:6379 timed out", Self.fields("10.0.0.1:6379"))
            recorder.advance(.milliseconds(500))
        }
        // The line at 0 s, summaries at 30 s (61 times so far) and 60 s (121 times).
        #expect(recorder.written.map(\.repeats) == [nil, 61, 121])
        log.end()
        // The end: 140 times in all, since the first line's wall time.
        #expect(recorder.written.map(\.repeats) == [nil, 61, 121, 140])
        let last = recorder.lines.withLock { $0.last! }
        #expect(last.event == "redis_primary_unconfirmed" && last.level == "warning")
        #expect(last.fields.map(\.0) == ["sentinel", "named", "message", "repeats", "since"])
        #expect(last.fields.last!.1 == .string("2026-12-04T10:00:00.250Z"))

        // The next outage starts with its own line at once; an end with nothing unlogged writes nothing.
        log.record(key: "10.0.0.1:6379 timed out", Self.fields("10.0.0.1:6379"))
        log.end()
        #expect(recorder.written.map(\.repeats) == [nil, 61, 121, 140, nil])
    }

    @Test("another address or reason is logged at once, after a summary of the one before")
    func changeIsLoggedAtOnce() {
        let recorder = Recorder()
        let log = recorder.log()
        for _ in 0..<4 {
            log.record(key: "10.0.0.1:6379 timed out", Self.fields("10.0.0.1:6379"))
            recorder.advance(.milliseconds(500))
        }
        log.record(key: "10.0.0.2:6379 refused", Self.fields("10.0.0.2:6379"))
        #expect(recorder.written.map(\.repeats) == [nil, 4, nil])
        #expect(recorder.written.map(\.named) == ["10.0.0.1:6379", "10.0.0.1:6379", "10.0.0.2:6379"])
    }
}
