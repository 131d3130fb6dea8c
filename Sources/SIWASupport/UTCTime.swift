/// The one time format of the commands and the webhooks: RFC 3339 in UTC with
/// milliseconds (`2026-12-05T05:00:00.123Z`), written from and read to Unix milliseconds.
/// Plain arithmetic on the proleptic Gregorian calendar (no time zone database, no
/// Foundation formatter, no `gmtime`), so a value reads the same on every machine and
/// every date is checked, never rolled over (`2026-02-30` is refused, not 2 March).
public enum UTCTime {
    /// `2026-12-05T05:00:00.123Z`: always UTC, always three fraction digits.
    public static func format(milliseconds: Int64) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        append(milliseconds: milliseconds, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `format(milliseconds:)`'s bytes appended to `output`, with no String made: the event
    /// log writes one per line, on the request path.
    public static func append(milliseconds: Int64, to output: inout [UInt8]) {
        let (days, inDay) = floorDivision(milliseconds, 86_400_000)
        let (year, month, day) = civil(fromDays: days)
        func digits(_ value: Int64, _ count: Int) {
            var divisor: Int64 = 1
            for _ in 1..<count { divisor *= 10 }
            while divisor > 0 {
                output.append(UInt8(ascii: "0") + UInt8(truncatingIfNeeded: value / divisor % 10))
                divisor /= 10
            }
        }
        digits(year, 4)
        output.append(UInt8(ascii: "-"))
        digits(month, 2)
        output.append(UInt8(ascii: "-"))
        digits(day, 2)
        output.append(UInt8(ascii: "T"))
        digits(inDay / 3_600_000, 2)
        output.append(UInt8(ascii: ":"))
        digits(inDay / 60_000 % 60, 2)
        output.append(UInt8(ascii: ":"))
        digits(inDay / 1000 % 60, 2)
        output.append(UInt8(ascii: "."))
        digits(inDay % 1000, 3)
        output.append(UInt8(ascii: "Z"))
    }

    /// `2026-12-05`: the day of `milliseconds`, in UTC.
    public static func day(milliseconds: Int64) -> String {
        String(format(milliseconds: milliseconds).prefix(10))
    }

    /// Unix milliseconds of an RFC 3339 date and time with its zone: `Z` or `+01:00`,
    /// fractional seconds optional (1 to 9 digits, cut to milliseconds). Nil for anything
    /// else: no zone, a day or hour that does not exist, a leap second.
    public static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
            bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            let days = daysSinceEpoch(bytes[0..<10]),
            let hour = number(bytes[11..<13]), let minute = number(bytes[14..<16]), let second = number(bytes[17..<19]),
            hour < 24, minute < 60, second < 60
        else { return nil }
        var index = 19
        var fraction: Int64 = 0
        if bytes[index] == UInt8(ascii: ".") {
            let start = index + 1
            index = start
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard (1...9).contains(index - start) else { return nil }
            let digits = bytes[start..<min(index, start + 3)]
            fraction = (number(digits) ?? 0) * [100, 10, 1][digits.count - 1]
        }
        guard index < bytes.count else { return nil }
        var offsetMinutes: Int64 = 0
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            guard index + 1 == bytes.count else { return nil }
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard index + 6 == bytes.count, bytes[index + 3] == UInt8(ascii: ":"),
                let hours = number(bytes[(index + 1)..<(index + 3)]),
                let minutes = number(bytes[(index + 4)..<(index + 6)]), hours < 24, minutes < 60
            else { return nil }
            offsetMinutes = (hours * 60 + minutes) * (bytes[index] == UInt8(ascii: "-") ? -1 : 1)
        default:
            return nil
        }
        let local = ((days * 24 + hour) * 60 + minute) * 60 + second
        return (local - offsetMinutes * 60) * 1000 + fraction
    }

    /// Unix milliseconds at 00:00 UTC of `YYYY-MM-DD`; nil unless it is a day of the calendar.
    public static func parseDay(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count == 10, let days = daysSinceEpoch(bytes[...]) else { return nil }
        return days * 86_400_000
    }

    /// Days from 1970-01-01 to `YYYY-MM-DD` (years 0001 to 9999), nil unless a real day.
    private static func daysSinceEpoch(_ bytes: ArraySlice<UInt8>) -> Int64? {
        let start = bytes.startIndex
        guard bytes.count == 10, bytes[start + 4] == UInt8(ascii: "-"), bytes[start + 7] == UInt8(ascii: "-"),
            let year = number(bytes[start..<(start + 4)]), let month = number(bytes[(start + 5)..<(start + 7)]),
            let day = number(bytes[(start + 8)..<(start + 10)]), year >= 1, (1...12).contains(month),
            (1...daysIn(month: month, year: year)).contains(day)
        else { return nil }
        return days(fromCivil: year, month, day)
    }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Howard Hinnant's `days_from_civil`: exact for every proleptic Gregorian date.
    private static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = floorDivision(shiftedYear, 400).quotient
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// Howard Hinnant's `civil_from_days`, the inverse of `days(fromCivil:)`.
    private static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468
        let era = floorDivision(shifted, 146_097).quotient
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    private static func floorDivision(_ value: Int64, _ divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let quotient = value / divisor - (value % divisor < 0 ? 1 : 0)
        return (quotient, value - quotient * divisor)
    }

    /// Decimal digits only (no sign, no space), as a number.
    private static func number(_ digits: ArraySlice<UInt8>) -> Int64? {
        guard !digits.isEmpty else { return nil }
        var value: Int64 = 0
        for digit in digits {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) else { return nil }
            value = value * 10 + Int64(digit - UInt8(ascii: "0"))
        }
        return value
    }
}
