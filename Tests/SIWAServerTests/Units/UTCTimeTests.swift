import Glibc
import SIWASupport
import Testing

/// The one time format of the commands and the webhooks, written and read, against the C
/// library's `gmtime_r` and `timegm` as the oracle.
@Suite("UTC time: one format, one parser")
struct UTCTimeTests {
    @Test(
        "written as RFC 3339 in UTC with milliseconds",
        arguments: [
            (0, "1970-01-01T00:00:00.000Z"), (1_796_000_000_123, "2026-11-30T00:53:20.123Z"),
            (-1, "1969-12-31T23:59:59.999Z"), (1_709_164_800_000, "2024-02-29T00:00:00.000Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        ] as [(Int64, String)])
    func written(_ milliseconds: Int64, _ text: String) {
        #expect(UTCTime.format(milliseconds: milliseconds) == text)
        #expect(UTCTime.parse(text) == milliseconds)
    }

    @Test("every written time is gmtime's, and reads back to itself (a bounded sweep, 1900 to 2200)")
    func agreesWithGmtime() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5000 {
            let milliseconds = Int64.random(in: -2_208_988_800_000...7_258_118_400_000, using: &generator)
            var seconds = time_t(milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000)
            var parts = tm()
            _ = gmtime_r(&seconds, &parts)
            let text = UTCTime.format(milliseconds: milliseconds)
            let fields = text.split(whereSeparator: { "-T:.Z".contains($0) }).map { Int32($0) ?? -1 }
            #expect(
                fields.prefix(6) == [
                    parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                ], "\(milliseconds): \(text)")
            #expect(UTCTime.parse(text) == milliseconds, "\(text)")
        }
    }

    @Test(
        "read with a zone offset and 1 to 9 fraction digits (cut to milliseconds)",
        arguments: [
            ("2026-11-30T09:00:00+01:00", 1_796_025_600_000), ("2026-11-30T03:30:00-04:30", 1_796_025_600_000),
            ("2026-11-30T08:00:00Z", 1_796_025_600_000), ("2026-11-30t08:00:00z", 1_796_025_600_000),
            ("2026-11-30T08:00:00.5Z", 1_796_025_600_500), ("2026-11-30T08:00:00.123456789Z", 1_796_025_600_123),
        ] as [(String, Int64)])
    func read(_ text: String, _ milliseconds: Int64) {
        #expect(UTCTime.parse(text) == milliseconds)
    }

    @Test(
        "anything else is not a time: no zone, a day or hour that does not exist, a leap second, a stray byte",
        arguments: [
            "2026-02-30T00:00:00Z", "2023-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-11-30T24:00:00Z",
            "2026-11-30T08:60:00Z", "2026-11-30T08:00:60Z", "2026-11-30T08:00:00", "2026-11-30 08:00:00Z",
            "2026-11-30T08:00:00.Z", "2026-11-30T08:00:00.1234567890Z", "2026-11-30T08:00:00+0100",
            "2026-11-30T08:00:00+24:00", "2026-11-30T08:00:00Z ", "+2026-11-30T08:00:00Z", "2026-11-3OT08:00:00Z",
            "0000-01-01T00:00:00Z", "", "1796000000000",
        ])
    func refused(_ text: String) {
        #expect(UTCTime.parse(text) == nil)
    }

    @Test("a day: YYYY-MM-DD of the calendar at 00:00 UTC, as timegm reads it")
    func day() {
        for text in ["2024-02-29", "2026-11-30", "2000-01-01", "2100-12-31", "1970-01-01"] {
            let parts = text.split(separator: "-").map { Int32($0) ?? 0 }
            var fields = tm()
            fields.tm_year = parts[0] - 1900
            fields.tm_mon = parts[1] - 1
            fields.tm_mday = parts[2]
            #expect(UTCTime.parseDay(text) == Int64(timegm(&fields)) * 1000, "\(text)")
            #expect(UTCTime.day(milliseconds: UTCTime.parseDay(text) ?? 0) == text)
        }
        for text in ["2023-02-29", "2026-04-31", "2026-1-01", "2026-01-01T", "2026/01/01", "26-01-01"] {
            #expect(UTCTime.parseDay(text) == nil, "\(text)")
        }
    }
}
