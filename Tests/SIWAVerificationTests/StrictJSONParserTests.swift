import SIWAJSON
import SIWAVerification
import Testing

@Suite("Strict JSON parser")
struct StrictJSONParserTests {
    func parse(_ text: String) throws(JSONProblem) -> JSONValue { try StrictJSONParser.parse(Array(text.utf8)) }

    @Test("values")
    func values() throws {
        #expect(
            try parse(#" {"a":[1,-2,3.5,true,false,null],"b":"x\"\\\/\n\u00e9\ud83d\ude00"} "#)
                == .object([
                    "a": .array([.integer(1), .integer(-2), .number(3.5), .bool(true), .bool(false), .null]),
                    "b": .string("x\"\\/\né😀"),
                ]))
        #expect(try parse("9223372036854775808") == .number(9_223_372_036_854_775_808))
    }

    @Test(
        "syntax errors",
        arguments: [
            "", "{", "{\"a\"}", "{\"a\":1,}", "[1,]", "01", "1.", "-", "+1", "\"\\x\"", "\"\u{01}\"", "tru", "{} {}",
            "\"\\ud800\"", "\"\\udc00\"", "NaN", "'a'", "1e999",
        ])
    func syntaxErrors(_ text: String) {
        #expect {
            try parse(text)
        } throws: { error in
            if case .syntax = error as? JSONProblem { return true }
            return false
        }
    }

    @Test("invalid UTF-8 is refused")
    func invalidUTF8() {
        #expect(throws: JSONProblem.self) { try StrictJSONParser.parse([0x22, 0xC3, 0x28, 0x22]) }
    }

    /// Strings are scanned eight bytes at a time, and an all-ASCII run skips the UTF-8
    /// check: a special or non-ASCII byte at any offset, in or after the first word, must
    /// be seen exactly as the byte-by-byte rules see it.
    @Test("a special byte anywhere in a long string is seen, whichever word holds it")
    func specialBytesAtEveryOffset() throws {
        let length = 40
        func parseString(_ content: [UInt8]) throws(JSONProblem) -> JSONValue {
            try StrictJSONParser.parse([0x22] + content + [0x22])
        }
        let plain = [UInt8](repeating: UInt8(ascii: "a"), count: length)
        for offset in 0..<length {
            var withControl = plain
            withControl[offset] = 0x1F
            #expect(throws: JSONProblem.syntax(offset: offset + 1)) { try parseString(withControl) }

            var withInvalidUTF8 = plain
            withInvalidUTF8[offset] = 0xFF
            #expect(throws: JSONProblem.self) { try parseString(withInvalidUTF8) }

            var withQuote = plain
            withQuote[offset] = UInt8(ascii: "\"")
            #expect(throws: JSONProblem.self) { try parseString(withQuote) }

            var withEscape = plain
            withEscape.insert(UInt8(ascii: "\\"), at: offset)
            withEscape[offset + 1] = UInt8(ascii: "n")
            let escaped =
                String(repeating: "a", count: offset) + "\n" + String(repeating: "a", count: length - offset - 1)
            #expect(try parseString(withEscape) == .string(escaped))

            var withAccent = plain
            withAccent.replaceSubrange(offset..<(offset + 1), with: Array("é".utf8))
            let accented =
                String(repeating: "a", count: offset) + "é" + String(repeating: "a", count: length - offset - 1)
            #expect(try parseString(withAccent) == .string(accented))

            var withEdgeBytes = plain
            withEdgeBytes[offset] = offset.isMultiple(of: 2) ? 0x20 : 0x7F
            #expect(try parseString(withEdgeBytes) == .string(String(decoding: withEdgeBytes, as: UTF8.self)))
        }
    }

    @Test("duplicate member names are refused, also after unescaping")
    func duplicates() {
        #expect(throws: JSONProblem.duplicateMember("a")) { try parse(#"{"a":1,"a":1}"#) }
        #expect(throws: JSONProblem.duplicateMember("alg")) { try parse(#"{"alg":"RS256","\u0061lg":"none"}"#) }
    }

    @Test("depth is limited and 100,000 levels do not crash")
    func depth() {
        #expect(throws: JSONProblem.tooDeep(limit: 32)) {
            try parse(String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000))
        }
        #expect(throws: Never.self) {
            try parse(String(repeating: "[", count: 32) + String(repeating: "]", count: 32))
        }
        #expect(throws: JSONProblem.tooDeep(limit: 32)) {
            try parse(String(repeating: "[", count: 33) + String(repeating: "]", count: 33))
        }
    }
}

@Suite("Base64URL")
struct Base64URLTests {
    @Test("round trip of every length up to 40")
    func roundTrip() {
        for length in 0...40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 37 + 11) }
            #expect(Base64URL.decode(Base64URL.encode(bytes).utf8) == bytes)
        }
    }

    @Test("RFC 4648 vectors, unpadded")
    func vectors() {
        #expect(Base64URL.encode("foobar".utf8) == "Zm9vYmFy")
        #expect(Base64URL.encode("fooba".utf8) == "Zm9vYmE")
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
    }

    @Test(
        "padding, the standard alphabet, bad lengths and stray bits are refused",
        arguments: ["Zm8=", "+/8", "Z", "Zm9vY", "Zh", "Zm9", "Zm:v"])
    func refusals(_ text: String) {
        // "Zh" and "Zm9" carry non-zero unused bits: a second encoding of "f" and "fo".
        #expect(Base64URL.decode(text.utf8) == nil)
    }
}
