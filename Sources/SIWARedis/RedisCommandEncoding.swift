/// A command as Redis reads it (RESP: an array of bulk strings), appended to a buffer the
/// caller keeps, so sending a command allocates nothing once the buffer has grown.
///
/// Written here rather than with hiredis's `redisFormatCommandArgv`, which allocates a
/// new buffer per command and writes each argument's length with `sprintf`: with the
/// arrays of pointers and lengths it needs, that was the Redis call's largest cost in
/// serve's profile after the system calls (docs/performance.md, "Where serve's time goes").
/// The bytes are the same: `RedisCommandEncodingTests` holds them.
enum RedisCommandEncoding {
    /// Appends `*<count>\r\n` then `$<length>\r\n<bytes>\r\n` for each argument.
    static func append(_ arguments: [[UInt8]], to buffer: inout [UInt8]) {
        var size = 16
        for argument in arguments { size += argument.count + 16 }
        buffer.reserveCapacity(buffer.count + size)
        buffer.append(UInt8(ascii: "*"))
        appendDecimal(arguments.count, to: &buffer)
        appendLineEnd(to: &buffer)
        for argument in arguments {
            buffer.append(UInt8(ascii: "$"))
            appendDecimal(argument.count, to: &buffer)
            appendLineEnd(to: &buffer)
            buffer.append(contentsOf: argument)
            appendLineEnd(to: &buffer)
        }
    }

    private static func appendLineEnd(to buffer: inout [UInt8]) {
        buffer.append(UInt8(ascii: "\r"))
        buffer.append(UInt8(ascii: "\n"))
    }

    /// A count's decimal digits (counts are never negative), most significant first,
    /// written in place without a `String`.
    private static func appendDecimal(_ value: Int, to buffer: inout [UInt8]) {
        var digitCount = 1
        var scale = 10
        // Int.max has 19 digits; the bound also keeps `scale` from overflowing.
        while digitCount < 19 && value >= scale {
            digitCount += 1
            scale &*= 10
        }
        var index = buffer.count + digitCount - 1
        buffer.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: digitCount))
        var remaining = value
        while remaining > 0 {
            buffer[index] = UInt8(ascii: "0") + UInt8(remaining % 10)
            remaining /= 10
            index -= 1
        }
    }
}
