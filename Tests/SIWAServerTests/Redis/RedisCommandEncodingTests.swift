import Testing

@testable import SIWARedis

/// The bytes a command goes out as: RESP's array of bulk strings, as hiredis's
/// `redisFormatCommandArgv` wrote them before the encoder replaced it.
struct RedisCommandEncodingTests {
    private func encoded(_ arguments: [[UInt8]], after prefix: [UInt8] = []) -> String {
        var buffer = prefix
        RedisCommandEncoding.append(arguments, to: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }

    @Test func textArgumentsWithEveryLengthWidth() {
        let arguments: [[UInt8]] = [
            Array("SET".utf8), Array("0123456789".utf8), [], Array(repeating: UInt8(ascii: "x"), count: 100),
        ]
        #expect(
            encoded(arguments)
                == "*4\r\n$3\r\nSET\r\n$10\r\n0123456789\r\n$0\r\n\r\n$100\r\n"
                + String(repeating: "x", count: 100) + "\r\n")
    }

    @Test func bytesAreCopiedAsTheyAre() {
        let value: [UInt8] = [0, 13, 10, 255, 0x24, 0x2A]
        var buffer: [UInt8] = []
        RedisCommandEncoding.append([value], to: &buffer)
        #expect(buffer == Array("*1\r\n$6\r\n".utf8) + value + Array("\r\n".utf8))
    }

    @Test func appendsAfterWhatTheBufferHolds() {
        #expect(encoded([Array("PING".utf8)], after: Array("kept".utf8)) == "kept*1\r\n$4\r\nPING\r\n")
        #expect(encoded([]) == "*0\r\n")
    }

    @Test func tenOrMoreArgumentsAndLongLengths() {
        let arguments = (0..<12).map { Array(String($0).utf8) }
        let expected = "*12\r\n" + (0..<12).map { "$\(String($0).count)\r\n\($0)\r\n" }.joined()
        #expect(encoded(arguments) == expected)
        let large = [UInt8](repeating: 7, count: 1_048_576)
        var buffer: [UInt8] = []
        RedisCommandEncoding.append([large], to: &buffer)
        let head = Array("*1\r\n$1048576\r\n".utf8)
        #expect(Array(buffer.prefix(head.count)) == head)
        #expect(buffer.count == head.count + large.count + 2)
        #expect(buffer.suffix(3) == [7, 13, 10])
    }
}
