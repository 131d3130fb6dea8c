/// Why a JSON text was refused.
public enum JSONProblem: Error, Sendable, Equatable {
    /// Not RFC 8259 JSON (including invalid UTF-8 and trailing bytes).
    case syntax(offset: Int)
    /// An object names the same member twice; Foundation's parsers would keep one silently.
    case duplicateMember(String)
    /// Arrays and objects nested deeper than the parser's limit.
    case tooDeep(limit: Int)
}

/// An RFC 8259 parser that refuses what lenient parsers accept silently:
/// duplicate member names, invalid UTF-8, lone surrogates, trailing bytes,
/// and nesting deeper than a small limit (so hostile input cannot exhaust the stack).
public struct StrictJSONParser {
    public static let defaultDepthLimit = 32

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private let depthLimit: Int

    private init(bytes: UnsafeBufferPointer<UInt8>, depthLimit: Int) {
        self.bytes = bytes
        self.depthLimit = depthLimit
    }

    /// Parses one JSON text that fills `bytes` exactly.
    public static func parse<Bytes: Collection<UInt8>>(
        _ bytes: Bytes, depthLimit: Int = defaultDepthLimit
    ) throws(JSONProblem) -> JSONValue {
        let result: Result<JSONValue, JSONProblem>? = bytes.withContiguousStorageIfAvailable { buffer in
            parseBuffer(buffer, depthLimit: depthLimit)
        }
        if let result { return try result.get() }
        let copy = Array(bytes)
        return try copy.withUnsafeBufferPointer { parseBuffer($0, depthLimit: depthLimit) }.get()
    }

    private static func parseBuffer(
        _ buffer: UnsafeBufferPointer<UInt8>, depthLimit: Int
    ) -> Result<JSONValue, JSONProblem> {
        var parser = StrictJSONParser(bytes: buffer, depthLimit: depthLimit)
        do throws(JSONProblem) {
            parser.skipWhitespace()
            let value = try parser.parseValue(depth: 0)
            parser.skipWhitespace()
            guard parser.index == buffer.count else { throw .syntax(offset: parser.index) }
            return .success(value)
        } catch {
            return .failure(error)
        }
    }

    private var syntaxError: JSONProblem { .syntax(offset: index) }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue(depth: Int) throws(JSONProblem) -> JSONValue {
        guard index < bytes.count else { throw syntaxError }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw syntaxError
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONProblem) {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw syntaxError }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != start[offset] { throw syntaxError }
        index += count
    }

    private mutating func parseObject(depth: Int) throws(JSONProblem) -> JSONValue {
        guard depth <= depthLimit else { throw .tooDeep(limit: depthLimit) }
        index += 1
        // Room for a typical object up front: growing a dictionary reallocates and rehashes.
        var members = [String: JSONValue](minimumCapacity: 8)
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw syntaxError }
            let name = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw syntaxError }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            guard members.updateValue(value, forKey: name) == nil else { throw .duplicateMember(name) }
            skipWhitespace()
            guard index < bytes.count else { throw syntaxError }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}") else { throw syntaxError }
            index += 1
            return .object(members)
        }
    }

    private mutating func parseArray(depth: Int) throws(JSONProblem) -> JSONValue {
        guard depth <= depthLimit else { throw .tooDeep(limit: depthLimit) }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw syntaxError }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "]") else { throw syntaxError }
            index += 1
            return .array(elements)
        }
    }

    private mutating func parseNumber() throws(JSONProblem) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw syntaxError }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if isDigit(bytes[index]) {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        } else {
            throw syntaxError
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw syntaxError }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard index < bytes.count, isDigit(bytes[index]) else { throw syntaxError }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .integer(value) }
        guard let value = Double(text), value.isFinite else { throw .syntax(offset: start) }
        return .number(value)
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private mutating func parseString() throws(JSONProblem) -> String {
        index += 1
        let start = index
        // Fast path: no escapes. Eight bytes at a time (SWAR: the tests below can stop early
        // on a word holding no special byte, never late) until a word holds a quote, a
        // backslash or a control byte; the byte loop below then finds which. The bytes
        // passed are OR-ed together on the way, so an all-ASCII string (nearly every one
        // here, the 1 KB token included) is not scanned a second time to learn that.
        // Plain integer code: the generic SIMD reductions (`any`) cost more than the scan.
        var orOfBytes: UInt8 = 0
        if let base = bytes.baseAddress {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highBits: UInt64 = 0x8080_8080_8080_8080
            var orOfWords: UInt64 = 0
            while index + 8 <= bytes.count {
                let word = UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self))
                let quotes = word ^ (ones &* UInt64(UInt8(ascii: "\"")))
                let backslashes = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
                // A byte of x is zero (or below 0x20) exactly when some byte of these is flagged.
                let hasQuote = (quotes &- ones) & ~quotes & highBits
                let hasBackslash = (backslashes &- ones) & ~backslashes & highBits
                let hasControl = (word &- ones &* 0x20) & ~word & highBits
                if hasQuote | hasBackslash | hasControl != 0 { break }
                orOfWords |= word
                index += 8
            }
            orOfBytes = (orOfWords & highBits) != 0 ? 0x80 : 0
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let raw = UnsafeBufferPointer(rebasing: bytes[start..<index])
                let text =
                    orOfBytes < 0x80 ? String(decoding: raw, as: UTF8.self) : try Self.makeString(raw, offset: start)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw syntaxError }
            orOfBytes |= byte
            index += 1
        }
        var decoded = [UInt8]()
        decoded.reserveCapacity(bytes.count - start)
        decoded.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                let text = try decoded.withUnsafeBufferPointer { buffer throws(JSONProblem) in
                    try Self.makeString(buffer, offset: start)
                }
                index += 1
                return text
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw syntaxError }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): decoded.append(0x22)
                case UInt8(ascii: "\\"): decoded.append(0x5C)
                case UInt8(ascii: "/"): decoded.append(0x2F)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0C)
                case UInt8(ascii: "n"): decoded.append(0x0A)
                case UInt8(ascii: "r"): decoded.append(0x0D)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "u"): try appendUnicodeEscape(to: &decoded)
                default: throw .syntax(offset: index - 1)
                }
            default:
                // Copy the run up to the next quote or escape in one step.
                let runStart = index
                while index < bytes.count, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\") {
                    guard bytes[index] >= 0x20 else { throw syntaxError }
                    index += 1
                }
                decoded.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
            }
        }
        throw syntaxError
    }

    /// Strict UTF-8: ASCII (nearly every string here) takes the cheap path; anything else is
    /// validated, and invalid UTF-8 is a syntax error, never repaired.
    private static func makeString(_ raw: UnsafeBufferPointer<UInt8>, offset: Int) throws(JSONProblem) -> String {
        var isASCII = true
        for byte in raw where byte >= 0x80 {
            isASCII = false
            break
        }
        if isASCII { return String(decoding: raw, as: UTF8.self) }
        guard let text = String(validating: raw, as: UTF8.self) else { throw .syntax(offset: offset) }
        return text
    }

    private mutating func parseHexQuad() throws(JSONProblem) -> UInt32 {
        guard bytes.count - index >= 4 else { throw syntaxError }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw syntaxError
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private mutating func appendUnicodeEscape(to decoded: inout [UInt8]) throws(JSONProblem) {
        var scalarValue = try parseHexQuad()
        if (0xD800...0xDBFF).contains(scalarValue) {
            guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
            else { throw syntaxError }
            index += 2
            let low = try parseHexQuad()
            guard (0xDC00...0xDFFF).contains(low) else { throw syntaxError }
            scalarValue = 0x10000 + ((scalarValue - 0xD800) << 10) + (low - 0xDC00)
        } else if (0xDC00...0xDFFF).contains(scalarValue) {
            throw syntaxError
        }
        guard let scalar = Unicode.Scalar(scalarValue) else { throw syntaxError }
        decoded.append(contentsOf: UTF8.encode(scalar)!)
    }
}
