import SIWAJSON
import SIWAVerification
import Testing

/// The writer's exact output: the request path writes log lines, response bodies and
/// Redis messages with it, byte by byte, with a whole-string copy when nothing needs
/// escaping.
@Suite("JSON writer")
struct JSONWriterTests {
    @Test("escapes quote, backslash, controls, DEL, U+2028 and U+2029; copies every other character as UTF-8")
    func escapes() {
        let text = "a\"b\\c\nd\re\tf\u{01}g\u{1F}h\u{7F}i\u{2028}j\u{2029}k\u{2026}l\u{E9}m\u{1F600}n"
        #expect(
            JSONWriter.serialize(.string(text))
                == #""a\"b\\c\nd\re\tf\u0001g\u001fh\u007fi\u2028j\u2029k"# + "\u{2026}l\u{E9}m\u{1F600}n\"")
        // Alone, with nothing else to escape: the fast path must not copy them as they are.
        #expect(JSONWriter.serialize(.string("a\u{2028}b")) == #""a\u2028b""#)
        #expect(JSONWriter.serialize(.string("\u{2029}")) == #""\u2029""#)
        // The fast path: nothing to escape, copied whole.
        #expect(JSONWriter.serialize(.string("caf\u{E9} \u{2026} plain")) == "\"caf\u{E9} \u{2026} plain\"")
        // A string that ends in the first bytes of a multi-byte character.
        #expect(JSONWriter.serialize(.string("x\u{2027}")) == "\"x\u{2027}\"")
        #expect(JSONWriter.serialize(.string("")) == #""""#)
    }

    @Test("objects keep their member order; dictionaries are written with sorted keys")
    func objects() {
        #expect(
            JSONWriter.object([("kid", .string("k")), ("alg", .string("RS256")), ("n", .integer(-3))])
                == #"{"kid":"k","alg":"RS256","n":-3}"#)
        #expect(
            JSONWriter.serialize(
                .object(["status": .string("ok"), "error": .null, "list": .array([.bool(true), .number(0.5)])]))
                == #"{"error":null,"list":[true,0.5],"status":"ok"}"#)
        var bytes: [UInt8] = Array("x".utf8)
        JSONWriter.writeString("y\"", to: &bytes)
        #expect(bytes == Array(#"x"y\"""#.utf8))
    }
}
