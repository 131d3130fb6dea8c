/// Writes JSON text. Objects built from pairs keep their order (a JWS header must
/// read `{"kid":…,"alg":…}` exactly); dictionaries are written with sorted keys.
public enum JSONWriter {
    public static func serialize(_ value: JSONValue) -> String {
        var output = ""
        write(value, to: &output)
        return output
    }

    public static func object(_ members: [(String, JSONValue)]) -> String {
        var output = "{"
        for (index, member) in members.enumerated() {
            if index > 0 { output += "," }
            writeString(member.0, to: &output)
            output += ":"
            write(member.1, to: &output)
        }
        return output + "}"
    }

    private static func write(_ value: JSONValue, to output: inout String) {
        switch value {
        case .null: output += "null"
        case .bool(let flag): output += flag ? "true" : "false"
        case .integer(let number): output += String(number)
        case .number(let number): output += "\(number)"
        case .string(let text): writeString(text, to: &output)
        case .array(let elements):
            output += "["
            for (index, element) in elements.enumerated() {
                if index > 0 { output += "," }
                write(element, to: &output)
            }
            output += "]"
        case .object(let members):
            output += object(members.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        }
    }

    private static func writeString(_ text: String, to output: inout String) {
        output += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _
            where scalar.value < 0x20 || scalar.value == 0x7F || scalar.value == 0x2028 || scalar.value == 0x2029:
                let hex = String(scalar.value, radix: 16)
                output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }
}
