/// Writes JSON text. Objects built from pairs keep their order (a JWS header must
/// read `{"kid":…,"alg":…}` exactly); dictionaries are written with sorted keys.
///
/// Everything is written as UTF-8 bytes into a `[UInt8]` (the `String` forms wrap the
/// byte forms): the request path writes a log line, a response body and a Redis
/// message per request, and a string with nothing to escape is copied whole.
public enum JSONWriter {
    public static func serialize(_ value: JSONValue) -> String {
        var output: [UInt8] = []
        write(value, to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    public static func object(_ members: [(String, JSONValue)]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(128)
        writeObject(members, to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Appends `{"name":value,...}`, the members in the order given.
    public static func writeObject(_ members: [(String, JSONValue)], to output: inout [UInt8]) {
        output.append(UInt8(ascii: "{"))
        for (index, member) in members.enumerated() {
            if index > 0 { output.append(UInt8(ascii: ",")) }
            writeString(member.0, to: &output)
            output.append(UInt8(ascii: ":"))
            write(member.1, to: &output)
        }
        output.append(UInt8(ascii: "}"))
    }

    /// Appends one value.
    public static func write(_ value: JSONValue, to output: inout [UInt8]) {
        switch value {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let flag): output.append(contentsOf: (flag ? "true" : "false").utf8)
        case .integer(let number): output.append(contentsOf: String(number).utf8)
        case .number(let number): output.append(contentsOf: "\(number)".utf8)
        case .string(let text): writeString(text, to: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                write(element, to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            writeObject(members.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }, to: &output)
        }
    }

    /// Appends a quoted string. Escaped: `"`, `\`, control characters (U+0000 to U+001F
    /// and U+007F), and U+2028 / U+2029 (line breaks to JavaScript); everything else is
    /// copied as UTF-8.
    public static func writeString(_ text: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            if !bytes.contains(where: needsCare) {
                output.append(contentsOf: bytes)
            } else {
                writeEscaping(bytes, to: &output)
            }
        }
        output.append(UInt8(ascii: "\""))
    }

    /// A byte that may need escaping: ASCII control, `"`, `\`, DEL, or the first byte of
    /// U+2028 / U+2029 (0xE2), which the slow path looks at closely.
    private static func needsCare(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == 0x7F || byte == 0xE2
    }

    private static func writeEscaping(_ bytes: UnsafeBufferPointer<UInt8>, to output: inout [UInt8]) {
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): output.append(contentsOf: #"\\"#.utf8)
            case UInt8(ascii: "\n"): output.append(contentsOf: #"\n"#.utf8)
            case UInt8(ascii: "\r"): output.append(contentsOf: #"\r"#.utf8)
            case UInt8(ascii: "\t"): output.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20, 0x7F: writeUnicodeEscape(UInt32(byte), to: &output)
            case 0xE2
            where index + 2 < bytes.count && bytes[index + 1] == 0x80
                && (bytes[index + 2] == 0xA8 || bytes[index + 2] == 0xA9):
                // U+2028 or U+2029 (valid UTF-8: E2 80 A8 / E2 80 A9).
                writeUnicodeEscape(bytes[index + 2] == 0xA8 ? 0x2028 : 0x2029, to: &output)
                index += 2
            default: output.append(byte)
            }
            index += 1
        }
    }

    /// `\u` and four lowercase hex digits.
    private static func writeUnicodeEscape(_ value: UInt32, to output: inout [UInt8]) {
        let digits = Array("0123456789abcdef".utf8)
        output.append(contentsOf: #"\u"#.utf8)
        for shift in stride(from: 12, through: 0, by: -4) {
            output.append(digits[Int((value >> UInt32(shift)) & 0xF)])
        }
    }
}
