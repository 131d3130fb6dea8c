import Glibc

/// A response's `Retry-After` (RFC 9110 section 10.2.3): delay seconds, or an HTTP date
/// (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`), as a number of seconds from `now`.
public enum RetryAfter {
    /// Whole seconds to wait from `nowSeconds` (Unix seconds); nil when `text` is neither
    /// form. A date in the past is 0.
    public static func seconds(_ text: String, nowSeconds: Int64) -> Int64? {
        let trimmed = trimmed(text)
        if !trimmed.isEmpty, trimmed.utf8.count <= 10, trimmed.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            return Int64(trimmed)
        }
        guard let date = httpDate(trimmed) else { return nil }
        return max(0, date - nowSeconds)
    }

    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    private static let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]

    /// IMF-fixdate only, the form RFC 9110 requires senders to use, as Unix seconds.
    static func httpDate(_ text: String) -> Int64? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), days.contains(String(parts[0].prefix(3))),
            parts[1].count == 2, let day = Int32(parts[1]), let month = months.firstIndex(of: parts[2]),
            parts[3].count == 4, let year = Int32(parts[3]), parts[5] == "GMT"
        else { return nil }
        let clock = parts[4].split(separator: ":", omittingEmptySubsequences: false)
        guard clock.count == 3, clock.allSatisfy({ $0.count == 2 }), let hour = Int32(clock[0]),
            let minute = Int32(clock[1]), let second = Int32(clock[2]), (1...31).contains(day), (0...23).contains(hour),
            (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        var fields = tm()
        fields.tm_year = year - 1900
        fields.tm_mon = Int32(month)
        fields.tm_mday = day
        fields.tm_hour = hour
        fields.tm_min = minute
        fields.tm_sec = second
        return Int64(timegm(&fields))
    }

    /// `text` without the spaces and tabs around it (RFC 9110's optional whitespace).
    private static func trimmed(_ text: String) -> String {
        var scalars = Substring(text).unicodeScalars
        while let first = scalars.first, first == " " || first == "\t" { scalars.removeFirst() }
        while let last = scalars.last, last == " " || last == "\t" { scalars.removeLast() }
        return String(scalars)
    }
}
