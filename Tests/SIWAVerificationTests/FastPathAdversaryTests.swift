import Glibc
import SIWACrypto
import SIWAJSON
import SIWATestKit
import Testing

@testable import SIWAVerification

/// An adversary's read of the verification fast path: hostile spellings signed with the
/// test key (so the claims are reached, not refused at the signature), the plain JSON reader
/// held to the strict parser on generated documents, and every buffer the fast path reads
/// or writes placed against an inaccessible page, so a read or write one byte past the end
/// is a crash rather than a silent pass.
@Suite("Fast path against an adversary")
struct FastPathAdversaryTests {
    typealias Differential = FastPathDifferentialTests
    static let now = Fixtures.now

    // MARK: Guard pages

    /// Memory whose neighbouring pages are inaccessible (`PROT_NONE`): bytes placed against
    /// the end (or the start) of the accessible part fault on any access past it.
    final class GuardedRegion {
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        let accessiblePages = 4
        let base: UnsafeMutableRawPointer

        init() {
            let total = pageSize * (accessiblePages + 2)
            let mapped = mmap(nil, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
            precondition(mapped != nil && mapped != UnsafeMutableRawPointer(bitPattern: -1), "mmap failed")
            base = mapped!
            precondition(mprotect(base, pageSize, PROT_NONE) == 0)
            precondition(mprotect(base + pageSize * (accessiblePages + 1), pageSize, PROT_NONE) == 0)
        }

        deinit { munmap(base, pageSize * (accessiblePages + 2)) }

        var capacity: Int { pageSize * accessiblePages }
        private var accessibleStart: UnsafeMutablePointer<UInt8> {
            (base + pageSize).assumingMemoryBound(to: UInt8.self)
        }

        /// `bytes` copied so that their last byte is the last accessible one.
        func atEnd<Result>(_ bytes: [UInt8], _ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
            precondition(bytes.count <= capacity)
            let start = accessibleStart + (capacity - bytes.count)
            bytes.withUnsafeBufferPointer { source in
                if let from = source.baseAddress { start.update(from: from, count: source.count) }
            }
            return body(UnsafeBufferPointer(start: start, count: bytes.count))
        }

        /// `bytes` copied so that their first byte is the first accessible one.
        func atStart<Result>(_ bytes: [UInt8], _ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
            precondition(bytes.count <= capacity)
            bytes.withUnsafeBufferPointer { source in
                if let from = source.baseAddress { accessibleStart.update(from: from, count: source.count) }
            }
            return body(UnsafeBufferPointer(start: accessibleStart, count: bytes.count))
        }

        /// Room for `count` bytes ending at the last accessible byte.
        func outputAtEnd(_ count: Int) -> UnsafeMutableBufferPointer<UInt8> {
            precondition(count <= capacity)
            return UnsafeMutableBufferPointer(start: accessibleStart + (capacity - count), count: count)
        }
    }

    // MARK: The plain reader against the strict parser

    /// The value the plain reader gives a member, in the strict parser's terms; arrays by
    /// their string elements when they have only such, else by the strict parser on the
    /// array's bytes (what is compared then is that the reader found the array's bounds).
    static func plainValue(_ bytes: UnsafeBufferPointer<UInt8>, _ member: PlainJSONMember) -> JSONValue? {
        let range = member.valueStart..<member.valueEnd
        switch member.kind {
        case .string: return .string(bytes.string(range))
        case .escapedString:
            let capacity = PlainJSONReader.unescapeCapacity(range.count)
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { output in
                let count = PlainJSONReader.unescape(bytes, range, into: output)
                return .string(String(decoding: UnsafeBufferPointer(rebasing: output[0..<count]), as: UTF8.self))
            }
        case .integer: return .integer(member.integer)
        case .trueValue: return .bool(true)
        case .falseValue: return .bool(false)
        case .null: return .null
        case .object: return plainObject(bytes, range).map(JSONValue.object)
        case .array:
            if let strings = PlainJSONReader.stringElements(bytes, of: range) {
                return .array(strings.map { .string(bytes.string($0)) })
            }
            return try? StrictJSONParser.parse(Array(UnsafeBufferPointer(rebasing: bytes[range])))
        }
    }

    static func plainObject(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> [String: JSONValue]? {
        PlainJSONReader.withObject(bytes, in: range) { members -> [String: JSONValue]? in
            var object: [String: JSONValue] = [:]
            for member in members {
                let name = bytes.string(member.nameStart..<member.nameEnd)
                guard let value = plainValue(bytes, member) else { return nil }
                // A name twice is the reader's fault, not a reason to look as if it refused.
                if object.updateValue(value, forKey: name) != nil {
                    Issue.record("the reader read the name \(name) twice in one object")
                }
            }
            return object
        }
    }

    /// What the reader gives `document` placed against a guard page at its end and at its
    /// start (the two must agree), and whether the strict parser accepted the same bytes
    /// with the same members. Returns whether the reader read it.
    @discardableResult
    static func compareReader(_ document: [UInt8], _ region: GuardedRegion, _ label: String) -> Bool {
        let atEnd = region.atEnd(document) { plainObject($0, 0..<$0.count) }
        let atStart = region.atStart(document) { plainObject($0, 0..<$0.count) }
        #expect(atEnd == atStart, "\(label): \(Array(document))")
        guard let plain = atEnd else { return false }
        let strict = Result { () throws(JSONProblem) in try StrictJSONParser.parse(document) }
        switch strict {
        case .success(.object(let members)):
            #expect(members == plain, "\(label): the members differ: \(Array(document))")
        case .success(let other):
            Issue.record(
                "\(label): the reader read an object where the strict parser read \(other): \(Array(document))")
        case .failure(let problem):
            Issue.record(
                "\(label): FAIL-OPEN, the reader read what the strict parser refuses (\(problem)): \(Array(document))")
        }
        return true
    }

    /// Hostile pieces of JSON text: each is either valid JSON text or breaks one rule.
    static let stringPieces: [[UInt8]] = [
        Array("abc".utf8), Array("iss".utf8), Array("0123456789abcdef".utf8), Array(#"\""#.utf8), Array(#"\\"#.utf8),
        Array(#"\/"#.utf8), Array(#"\b"#.utf8), Array(#"\f"#.utf8), Array(#"\n"#.utf8), Array(#"\r"#.utf8),
        Array(#"\t"#.utf8), Array(#"\u0069"#.utf8), Array(#"\u00e9"#.utf8), Array(#"\ud83d\ude00"#.utf8),
        Array(#"\ud800"#.utf8), Array(#"\udc00"#.utf8), Array(#"\u0000"#.utf8), Array(#"\x"#.utf8),
        Array(#"\u12"#.utf8),
        Array(#"\'"#.utf8), [0x7F], [0x01], [0x09], [0x0A], [0x1F], [0xC3, 0xA9], [0xC0, 0xAF], [0xE0, 0x80, 0xAF],
        [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0x80], [0xE2, 0x82], [0xFF], [0xEF, 0xBB, 0xBF],
        [0xE2, 0x80, 0xA8],
    ]
    static let numberPieces = [
        "0", "-0", "1", "-1", "7", "01", "00", "-01", "1.0", "1e3", "1E3", "1e+3", "-0.0", "1.", ".5", "-", "+1",
        "123456789012345678", "1234567890123456789", "12345678901234567890123", "9223372036854775807",
        "-9223372036854775807", "1e400", "0x10", "1_0", "NaN", "Infinity",
        // Numbers of 19 digits past Int64's range (they trapped the plain reader once;
        // `integerPastInt64DoesNotTrap` proves that in a process of its own).
        "9999999999999999999", "9223372036854775808", "-9223372036854775808",
    ]
    static let literalPieces = ["true", "false", "null", "tru", "nul", "True", "nulll", "falsey"]
    static let whitespacePieces: [[UInt8]] = [
        [], [], [], [0x20], [0x09], [0x0A], [0x0D], [0x20, 0x0A, 0x20], [0x0B], [0x0C], [0xC2, 0xA0], [0x00],
    ]
    static let namePool = ["iss", "aud", "a", "b", "kid", "type", "payload", "events"]

    /// A random document, mostly valid so that the reader reads a good share, with a hostile
    /// piece now and then: in a string, a name (a pool of few names, so duplicates come at
    /// every depth), a number, a literal, whitespace, the structure or the end.
    struct DocumentGenerator {
        var random: FastPathDifferentialTests.SeededGenerator
        var bytes: [UInt8] = []

        mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &random) < percent }

        mutating func whitespace() {
            if chance(80) { return }
            let piece = FastPathAdversaryTests.whitespacePieces.randomElement(using: &random)!
            bytes += piece
        }

        mutating func string(name: Bool) {
            bytes.append(UInt8(ascii: "\""))
            if name && chance(70) {
                let pooled = FastPathAdversaryTests.namePool.randomElement(using: &random)!
                // Now and then the same name spelt with an escape.
                let escaped = chance(10)
                if escaped {
                    bytes += Array(#"\u00"#.utf8) + Array(String(pooled.utf8.first!, radix: 16).utf8)
                    bytes += Array(pooled.utf8.dropFirst())
                } else {
                    bytes += Array(pooled.utf8)
                }
            } else {
                for _ in 0..<Int.random(in: 0...4, using: &random) {
                    // Runs of plain letters of every length, so a special byte lands at
                    // every offset of an eight-byte word.
                    let run = Int.random(in: 0...9, using: &random)
                    bytes += [UInt8](repeating: UInt8(ascii: "x"), count: run)
                    if chance(35) {
                        let piece = FastPathAdversaryTests.stringPieces.randomElement(using: &random)!
                        bytes += piece
                    }
                }
            }
            if chance(2) { return }  // unterminated
            bytes.append(UInt8(ascii: "\""))
        }

        mutating func value(depth: Int) {
            switch Int.random(in: 0..<10, using: &random) {
            case 0, 1, 2: string(name: false)
            case 3, 4:
                let number =
                    chance(80)
                    ? String(Int64.random(in: -1_000_000_000_000...9_000_000_000_000, using: &random))
                    : FastPathAdversaryTests.numberPieces.randomElement(using: &random)!
                bytes += Array(number.utf8)
            case 5:
                let literals = chance(85) ? ["true", "false", "null"] : FastPathAdversaryTests.literalPieces
                let literal = literals.randomElement(using: &random)!
                bytes += Array(literal.utf8)
            case 6, 7: depth < 11 ? object(depth: depth + 1) : string(name: false)
            default: depth < 11 ? array(depth: depth + 1) : bytes.append(UInt8(ascii: "0"))
            }
        }

        mutating func object(depth: Int) {
            bytes.append(UInt8(ascii: "{"))
            whitespace()
            let many = chance(3)
            let count = many ? Int.random(in: 15...18, using: &random) : Int.random(in: 0...4, using: &random)
            for index in 0..<count {
                if index > 0 {
                    if !chance(1) { bytes.append(UInt8(ascii: ",")) }
                    whitespace()
                }
                if count > 6 {
                    bytes += Array("\"m\(index)\"".utf8)
                } else {
                    string(name: true)
                }
                whitespace()
                if !chance(1) { bytes.append(UInt8(ascii: ":")) }
                whitespace()
                value(depth: depth)
                whitespace()
            }
            if count > 0 && chance(1) { bytes.append(UInt8(ascii: ",")) }
            if !chance(1) { bytes.append(UInt8(ascii: "}")) }
        }

        mutating func array(depth: Int) {
            bytes.append(UInt8(ascii: "["))
            whitespace()
            let count = Int.random(in: 0...4, using: &random)
            for index in 0..<count {
                if index > 0 {
                    if !chance(1) { bytes.append(UInt8(ascii: ",")) }
                    whitespace()
                }
                value(depth: depth)
                whitespace()
            }
            if count > 0 && chance(1) { bytes.append(UInt8(ascii: ",")) }
            if !chance(1) { bytes.append(UInt8(ascii: "]")) }
        }

        mutating func document() -> [UInt8] {
            bytes = []
            whitespace()
            object(depth: 1)
            whitespace()
            if chance(3) {
                let trailing = [[0x00], Array("{}".utf8), Array("x".utf8), [0xEF, 0xBB, 0xBF]].randomElement(
                    using: &random)!
                bytes += trailing
            }
            return bytes
        }
    }

    static let generatedDocuments = 4000

    @Test("generated documents: whatever the plain reader reads, the strict parser reads with the same members")
    func readerNeverReadsWhatStrictRefuses() {
        let region = GuardedRegion()
        var generator = DocumentGenerator(random: .init(state: 0xAD7E_2537))
        var read = 0
        var generated = 0
        while generated < Self.generatedDocuments {
            let document = generator.document()
            guard document.count <= region.capacity else { continue }
            generated += 1
            if Self.compareReader(document, region, "document \(generated)") { read += 1 }
        }
        // Not vacuous: a good share of the documents is read by the fast reader.
        #expect(read >= Self.generatedDocuments / 10, "read \(read) of \(Self.generatedDocuments)")
        #expect(read < Self.generatedDocuments, "every document read: the hostile pieces never landed")
    }

    /// A member as text: where its name and value lie, its kind and its integer.
    static func describe(_ member: PlainJSONMember) -> String {
        "\(member.nameStart)-\(member.nameEnd) \(member.kind) \(member.valueStart)-\(member.valueEnd) \(member.integer)"
    }

    /// Every member of the object in `range`, nested objects' members after their own, as
    /// text to compare: `withObject` reading it whole, or `withReadObject` passing over what
    /// an earlier read has read.
    static func membersAtEveryDepth(
        _ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, readBefore: Bool
    ) -> [String]? {
        let read = { (members: UnsafeBufferPointer<PlainJSONMember>) -> [String]? in
            var described: [String] = []
            for member in members {
                described.append(Self.describe(member))
                if member.kind == .object {
                    guard
                        let nested = membersAtEveryDepth(
                            bytes, member.valueStart..<member.valueEnd, readBefore: readBefore)
                    else { return nil }
                    described += nested
                }
            }
            return described
        }
        return readBefore
            ? PlainJSONReader.withReadObject(bytes, in: range, read)
            : PlainJSONReader.withObject(bytes, in: range, read)
    }

    /// Objects within objects holding brackets, braces, quotes and backslashes in their
    /// strings, where passing over a nested value by counting brackets could go wrong.
    static let nestedDocuments = [
        #"{"a":{"b":"}]{[","c":["\"}",{"d":"]"}]},"e":1}"#,
        #"{"a":{"b":{"c":{"d":"\\"}},"e":"\\\"]"},"f":[[],{}],"g":{}}"#,
        #"{"events":{"uri":{"subject":{"iss":"x","sub":"{\"}"},"reason":"]"}}}"#,
    ]

    @Test("an object read again after an earlier read has the same members, at every depth, as when read whole")
    func readBeforeGivesTheSameMembers() {
        let region = GuardedRegion()
        var generator = DocumentGenerator(random: .init(state: 0x5EED_0B1E))
        var documents = Self.nestedDocuments.map { Array($0.utf8) }
        while documents.count < Self.generatedDocuments { documents.append(generator.document()) }
        var nested = 0
        for document in documents where document.count <= region.capacity {
            region.atEnd(document) { bytes in
                guard let whole = Self.membersAtEveryDepth(bytes, 0..<bytes.count, readBefore: false) else { return }
                // The top object read whole; each object within it read again as already read.
                let again = PlainJSONReader.withObject(bytes, in: 0..<bytes.count) { members -> [String]? in
                    var described: [String] = []
                    for member in members {
                        described.append(Self.describe(member))
                        if member.kind == .object {
                            nested += 1
                            guard
                                let inner = Self.membersAtEveryDepth(
                                    bytes, member.valueStart..<member.valueEnd, readBefore: true)
                            else { return nil }
                            described += inner
                        }
                    }
                    return described
                }
                #expect(again == whole, "\(Array(document))")
            }
        }
        // Not vacuous: the hand-picked documents are read (each holds objects within objects),
        // and the generated ones brought more (the seed is fixed: 44 of them).
        for document in Self.nestedDocuments {
            let read = Array(document.utf8).withUnsafeBufferPointer {
                Self.membersAtEveryDepth($0, 0..<$0.count, readBefore: false)
            }
            #expect(read != nil, "\(document)")
        }
        #expect(nested >= 40, "only \(nested) nested objects")
    }

    #if DEBUG
        @Test("withReadObject on a range no read accepted whole (a duplicate inside) stops a debug build")
        func readBeforeOnUnreadBytesIsCaught() async {
            // In a process of its own: the check is an assertion, and it ends the process.
            await #expect(processExitsWith: .failure) {
                let document = Array(#"{"a":{"b":1,"b":2}}"#.utf8)
                _ = document.withUnsafeBufferPointer { bytes in
                    PlainJSONReader.withReadObject(bytes, in: 0..<bytes.count) { $0.count }
                }
            }
        }
    #endif

    /// Hand-picked documents on the reader's edges: each either read with the strict
    /// parser's members or left to it.
    static let edgeDocuments: [String] = [
        #"{"a":{"b":1,"b":2}}"#, #"{"a":[{"b":1,"b":2}]}"#, #"{"a":[[{"x":{"y":1,"y":1}}]]}"#,
        #"{"a":1,"\u0061":1}"#, #"{"iss":1,"i\u0073s":2}"#, #"{"a":"\ud800"}"#, #"{"a":"\udc00\ud800"}"#,
        #"{"a":"x\u0000"}"#, #"{"a":-0}"#, #"{"a":-0.0}"#, #"{"a":0e0}"#, #"{"a":123456789012345678}"#,
        #"{"a":1234567890123456789}"#, #"{"a":-123456789012345678}"#, #"{"a":12345678901234567890}"#,
        #"{"a":[1,]}"#, #"{"a":[,1]}"#, #"{"a":1,}"#, #"{,"a":1}"#, #"{"a" 1}"#, #"{"a"::1}"#, #"{"a":1}}"#,
        #"{"a":[1]]}"#, #"{"a":"\/\b\f\n\r\t\"\\"}"#, "{\"a\":\"\u{7F}\"}", #"{"a":"\u007f"}"#,
        String(repeating: #"{"a":"#, count: 8) + "1" + String(repeating: "}", count: 8),
        String(repeating: #"{"a":"#, count: 9) + "1" + String(repeating: "}", count: 9),
        #"{"a":"# + String(repeating: "[", count: 8) + String(repeating: "]", count: 8) + "}",
        "{" + (1...16).map { "\"m\($0)\":\($0)" }.joined(separator: ",") + "}",
        "{" + (1...17).map { "\"m\($0)\":\($0)" }.joined(separator: ",") + "}",
        "{\"a\":{" + (1...16).map { "\"m\($0)\":\($0)" }.joined(separator: ",") + "}}",
        "{\"a\":{" + (1...17).map { "\"m\($0)\":\($0)" }.joined(separator: ",") + "}}",
        "{\"a\":[" + (1...300).map { "\($0)" }.joined(separator: ",") + "]}",
    ]

    @Test("edge documents (depth, member count, duplicates at depth, escapes, numbers) against the strict parser")
    func edgeDocumentsAgainstStrict() {
        let region = GuardedRegion()
        for document in Self.edgeDocuments { Self.compareReader(Array(document.utf8), region, document) }
        // Raw bytes a String cannot carry, in a name, a value and an unrelated nested value.
        for bad: [UInt8] in [[0xC0, 0xAF], [0xED, 0xA0, 0x80], [0x80], [0xFF], [0xE2, 0x82], [0x00], [0x1F]] {
            for template in [#"{"a":"x"#, #"{"x"#, #"{"n":{"a":["x"#] {
                let closing: [UInt8] =
                    template.hasPrefix(#"{"x"#)
                    ? Array(#"":1}"#.utf8)
                    : template.hasPrefix(#"{"n"#) ? Array(#""]}}"#.utf8) : Array(#""}"#.utf8)
                let document = Array(template.utf8) + bad + closing
                #expect(!Self.compareReader(document, region, "raw \(bad)"), "the reader read raw \(bad)")
            }
        }
    }

    // MARK: Numbers past Int64

    /// Integers of 19 or more digits whose first 19 do not fit in an `Int64`: the reader
    /// must say nil (the strict parser reads them as doubles), never overflow.
    static let integersPastInt64 = [
        "9999999999999999999", "9223372036854775808", "-9223372036854775808", "99999999999999999999",
    ]

    @Test("a 19-digit integer past Int64 in an unauthenticated body or header gets the strict answer, not a trap")
    func integerPastInt64DoesNotTrap() async {
        // In a process of its own: the overflow traps, and a trap would end the whole run.
        await #expect(processExitsWith: .success) {
            let apple = NotificationVerifier(clientIDs: ["com.example.app"])
            let google = SecurityEventVerifier(clientIDs: ["com.example.app"])
            for number in FastPathAdversaryTests.integersPastInt64 {
                let header = Base64URL.encode(Array(#"{"alg":"RS256","kid":"k","n":\#(number)}"#.utf8))
                let token = header + "." + Base64URL.encode(Array("{}".utf8)) + ".AAAA"
                let bodies = [
                    Array(#"{"payload":"a.b.c","n":\#(number)}"#.utf8), Array(#"{"payload":"\#(token)"}"#.utf8),
                ]
                for body in bodies {
                    let fast = Differential.answer { () throws(VerificationError) in
                        try apple.verify(body: body, now: 0)
                    }
                    let strict = Differential.answer { () throws(VerificationError) in
                        try apple.verifyStrictly(body: body, now: 0)
                    }
                    guard fast == strict else { exit(1) }
                }
                let fast = Differential.answer { () throws(VerificationError) in
                    try google.verify(token: Array(token.utf8), keys: JSONWebKeySet(), issuer: "i", now: 0)
                }
                let strict = Differential.answer { () throws(VerificationError) in
                    try google.verifyStrictly(token: Array(token.utf8), keys: JSONWebKeySet(), issuer: "i", now: 0)
                }
                guard fast == strict else { exit(1) }
            }
            exit(0)
        }
    }

    // MARK: Bytes against the guard page

    @Test("base64url decoding into exact room next to a guard page gives what the strict decoder gives")
    func base64AgainstGuardPages() {
        let inputRegion = GuardedRegion()
        let outputRegion = GuardedRegion()
        var random = FastPathDifferentialTests.SeededGenerator(state: 64)
        let symbols = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        let hostile = Array("=+/ .\n".utf8) + [0x00, 0x80, 0xFF]
        for length in 0...70 {
            for round in 0..<12 {
                var text = (0..<length).map { _ in symbols.randomElement(using: &random)! }
                if round % 3 == 1, length > 0 {
                    text[Int.random(in: 0..<length, using: &random)] = hostile.randomElement(using: &random)!
                }
                let strict = Base64URL.decode(text)
                guard let count = Base64URL.decodedCount(symbols: length) else {
                    #expect(strict == nil)
                    continue
                }
                let output = outputRegion.outputAtEnd(count)
                let valid = inputRegion.atEnd(text) { Base64URL.decode($0, into: output.baseAddress!) }
                #expect(valid == (strict != nil), "\(String(decoding: text, as: UTF8.self))")
                if valid { #expect(Array(output) == strict, "\(String(decoding: text, as: UTF8.self))") }
            }
        }
    }

    @Test("unescaping into exact room next to a guard page gives the strict parser's text")
    func unescapeAgainstGuardPages() {
        let inputRegion = GuardedRegion()
        let outputRegion = GuardedRegion()
        var random = FastPathDifferentialTests.SeededGenerator(state: 92)
        let escapes = [#"\""#, #"\\"#, #"\/"#, #"\b"#, #"\f"#, #"\n"#, #"\r"#, #"\t"#]
        for round in 0..<600 {
            var text = ""
            for _ in 0..<Int.random(in: 1...5, using: &random) {
                text += String(repeating: "y", count: Int.random(in: 0...11, using: &random))
                text += escapes.randomElement(using: &random)!
            }
            if round % 2 == 0 { text += String(repeating: "z", count: Int.random(in: 0...9, using: &random)) }
            let document = Array("{\"v\":\"\(text)\"}".utf8)
            guard case .object(let strict)? = try? StrictJSONParser.parse(document) else {
                Issue.record("the strict parser refused \(text)")
                continue
            }
            let read = inputRegion.atEnd(document) { bytes -> String? in
                PlainJSONReader.withObject(bytes, in: 0..<bytes.count) { members -> String? in
                    guard let member = members.first, member.kind == .escapedString else { return nil }
                    let range = member.valueStart..<member.valueEnd
                    let output = outputRegion.outputAtEnd(PlainJSONReader.unescapeCapacity(range.count))
                    let count = PlainJSONReader.unescape(bytes, range, into: output)
                    return String(decoding: UnsafeBufferPointer(rebasing: output[0..<count]), as: UTF8.self)
                }
            }
            #expect(read != nil && JSONValue.string(read!) == strict["v"], "\(text)")
        }
    }

    @Test("truncated and hostile bodies, tokens and claims next to a guard page: no read past the end")
    func truncationsAgainstGuardPages() throws {
        let region = GuardedRegion()
        let body = Fixtures.body(claims: FastPathDifferentialTests.emailClaims)
        let segments = Fixtures.segments(Fixtures.token(claims: FastPathDifferentialTests.emailClaims))
        let claims = Array(FastPathDifferentialTests.emailClaims.utf8)
        let google = Array(
            try TestSecurityEvent.signed(claims: SecurityEventVerifierTests.claims(), key: Fixtures.primary).utf8)
        let verifier = Fixtures.verifier
        // Every prefix: each may stop inside a string, an escape, a number or a word load.
        for cut in 0...body.count {
            let prefix = Array(body[0..<cut])
            let shape = region.atEnd(prefix) { NotificationVerifier.payloadOfApplesShape($0) }
            #expect((shape != nil) == (cut == body.count))
            _ = region.atStart(prefix) { NotificationVerifier.payloadOfApplesShape($0) }
        }
        let token = Array(segments.joined(separator: ".").utf8)
        for cut in 0...token.count {
            let prefix = Array(token[0..<cut])
            let read = region.atEnd(prefix) {
                PlainToken.read($0, token: 0..<$0.count, checkingSecurityEventType: false)?.keyID
            }
            // Only the whole token, or a cut in the signature leaving a length base64url has.
            if read != nil { #expect(cut > segments[0].count + segments[1].count + 1) }
        }
        for cut in 0...google.count {
            let prefix = Array(google[0..<cut])
            _ = region.atEnd(prefix) { PlainToken.read($0, token: 0..<$0.count, checkingSecurityEventType: true) }
        }
        for cut in 0...claims.count {
            let prefix = Array(claims[0..<cut])
            let notification = region.atEnd(prefix) {
                verifier.plainNotification(claims: $0, 0..<$0.count, now: Self.now)
            }
            #expect((notification != nil) == (cut == claims.count))
        }
        let googleClaims = Array(SecurityEventVerifierTests.claims().utf8)
        for cut in 0...googleClaims.count {
            let prefix = Array(googleClaims[0..<cut])
            let event = region.atEnd(prefix) {
                SecurityEventVerifierTests.verifier.plainSecurityEvent(
                    claims: $0, 0..<$0.count, issuer: SecurityEventVerifierTests.issuer, now: Self.now)
            }
            #expect((event != nil) == (cut == googleClaims.count))
        }
    }

    // MARK: Hostile tokens, signed, through both paths

    /// Exact header and claims bytes (any bytes, not only what a `String` holds) signed
    /// RS256 with the test key.
    static func signed(header: [UInt8], claims: [UInt8], key: TestSigningKey = Fixtures.primary) throws -> String {
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(claims)
        return signingInput + "." + Base64URL.encode(try key.privateKey.signRS256(Array(signingInput.utf8)))
    }

    static let appleHeader = Array(Fixtures.header().utf8)
    static let googleHeader = Array(#"{"alg":"RS256","kid":"\#(Fixtures.primary.keyID)","typ":"secevent+jwt"}"#.utf8)

    /// Both paths on the signed body and on the claims alone; whether the strict steps
    /// accepted the body.
    @discardableResult
    static func compareAppleSigned(claims: [UInt8], header: [UInt8] = appleHeader, _ label: String) throws -> Bool {
        let token = try signed(header: header, claims: claims)
        Differential.compareAppleClaims(claims, label)
        return Differential.compareAppleBody(Fixtures.body(token: token), label)
    }

    @discardableResult
    static func compareGoogleSigned(claims: [UInt8], header: [UInt8] = googleHeader, _ label: String) throws -> Bool {
        Differential.compareGoogleClaims(claims, label)
        return Differential.compareGoogleToken(Array(try signed(header: header, claims: claims).utf8), label)
    }

    /// Apple claims with one member changed or added: raw bytes where a `String` cannot go.
    static let hostileAppleClaims: [(String, [UInt8])] = {
        func claims(_ text: String) -> [UInt8] { Array(text.utf8) }
        func event(_ text: String) -> String { Fixtures.eventsString(text) }
        let base = Fixtures.claims()
        var cases: [(String, [UInt8])] = [
            ("duplicate inside a nested object", claims(Fixtures.claims(extra: #""x":{"a":1,"a":2}"#))),
            ("duplicate inside an array's object", claims(Fixtures.claims(extra: #""x":[{"a":1,"a":1}]"#))),
            (
                "duplicate iss spelt \\u0069ss",
                claims(Fixtures.claims(extra: #""\u0069ss":"https://appleid.apple.com""#))
            ),
            ("duplicate events spelt with \\u", claims(Fixtures.claims(extra: #""even\u0074s":"{}""#))),
            (
                "duplicate in the events object",
                claims(Fixtures.claims(events: Fixtures.event(extra: #""sub":"other""#)))
            ),
            (
                "duplicate in the events string",
                claims(Fixtures.claims(events: event(Fixtures.event(extra: #""type":"email-enabled""#))))
            ),
            (
                "duplicate at depth in the events string",
                claims(Fixtures.claims(events: event(Fixtures.event(extra: #""o":{"k":1,"k":2}"#))))
            ),
            ("lone surrogate in an unrelated member", claims(Fixtures.claims(extra: #""x":"\ud800""#))),
            (
                "lone surrogate in the events string",
                claims(Fixtures.claims(events: event(Fixtures.event(extra: #""x":"\udc00""#))))
            ),
            (
                "escaped lone surrogate inside the events string",
                claims(
                    Fixtures.claims(
                        events: #""{\"type\":\"consent-revoked\",\"sub\":\"a\",\"event_time\":1,\"x\":\"\\ud800\"}""#))
            ),
            ("iat 1.0", claims(Fixtures.claims(iat: "\(now - 100).0"))),
            ("iat -0", claims(Fixtures.claims(iat: "-0"))),
            ("iat with exponent", claims(Fixtures.claims(iat: "1.7959999e9"))),
            ("iat 19 digits", claims(Fixtures.claims(iat: "1000000000000000000"))),
            ("iat leading zero", claims(Fixtures.claims(iat: "0\(now - 100)"))),
            ("iat in the future", claims(Fixtures.claims(exp: nil, iat: "\(now + 61)"))),
            ("iat at the leeway", claims(Fixtures.claims(exp: nil, iat: "\(now + 60)"))),
            ("exp -0", claims(Fixtures.claims(exp: "-0"))),
            ("exp 1e3", claims(Fixtures.claims(exp: "1e3"))),
            ("event_time -0", claims(Fixtures.claims(events: event(Fixtures.event(eventTime: "-0"))))),
            ("event_time 0", claims(Fixtures.claims(events: event(Fixtures.event(eventTime: "0"))))),
            ("event_time 1E2", claims(Fixtures.claims(events: event(Fixtures.event(eventTime: "1E2"))))),
            (
                "event_time 18 digits",
                claims(Fixtures.claims(events: event(Fixtures.event(eventTime: "100000000000000000"))))
            ),
            ("aud array of empties", claims(Fixtures.claims(aud: #"["",""]"#))),
            ("aud array with an empty", claims(Fixtures.claims(aud: #"["","com.example.app"]"#))),
            ("aud array with a duplicate", claims(Fixtures.claims(aud: #"["com.example.app","com.example.app"]"#))),
            ("aud array with null", claims(Fixtures.claims(aud: #"[null,"com.example.app"]"#))),
            ("aud nested array", claims(Fixtures.claims(aud: #"[["com.example.app"]]"#))),
            (
                "aud array with an escaped client",
                claims(Fixtures.claims(aud: #"["com.example\/app","com.example.app"]"#))
            ),
            ("aud unlisted", claims(Fixtures.claims(aud: #""com.example.other""#))),
            ("aud with a trailing space", claims(Fixtures.claims(aud: #""com.example.app ""#))),
            (
                "aud the other served client",
                claims(Fixtures.claims(aud: #"["x","com.example.watch","com.example.app"]"#))
            ),
            ("events a plain string", claims(Fixtures.claims(events: #""{}""#))),
            (
                "events an escaped string holding an escaped name",
                claims(Fixtures.claims(events: #""{\"t\\u0079pe\":\"consent-revoked\"}""#))
            ),
            ("events string with \\/ in sub", claims(Fixtures.claims(events: event(Fixtures.event(sub: #""a\/b""#))))),
            (
                "events string with a tab between tokens",
                claims(Fixtures.claims(events: #""{\t\"type\":\"consent-revoked\",\"sub\":\"s\",\"event_time\":1}""#))
            ),
            (
                "events string with a form feed between tokens",
                claims(Fixtures.claims(events: #""{\f\"type\":\"consent-revoked\",\"sub\":\"s\",\"event_time\":1}""#))
            ),
            (
                "events string with a backspace between tokens",
                claims(Fixtures.claims(events: #""{\b\"type\":\"consent-revoked\",\"sub\":\"s\",\"event_time\":1}""#))
            ),
            (
                "events string with trailing bytes",
                claims(Fixtures.claims(events: #""{\"type\":\"consent-revoked\",\"sub\":\"s\",\"event_time\":1}x""#))
            ),
            (
                "events string of two objects",
                claims(Fixtures.claims(events: #""{\"type\":\"consent-revoked\",\"sub\":\"s\",\"event_time\":1}{}""#))
            ),
            ("events an array", claims(Fixtures.claims(events: "[" + Fixtures.event() + "]"))),
            ("type with DEL", claims(Fixtures.claims(events: event(Fixtures.event(type: "\"consent\u{7F}revoked\""))))),
            // Raw DEL in the events object (the writer of the events string escapes it).
            (
                "type with DEL, events an object",
                claims(Fixtures.claims(events: Fixtures.event(type: "\"consent\u{7F}revoked\"")))
            ),
            ("sub with DEL, events an object", claims(Fixtures.claims(events: Fixtures.event(sub: "\"a\u{7F}b\"")))),
            ("jti with DEL", claims(Fixtures.claims(jti: "\"a\u{7F}b\""))),
            (
                "email with DEL, events an object",
                claims(
                    Fixtures.claims(events: Fixtures.event(type: #""email-enabled""#, extra: "\"email\":\"a\u{7F}@b\""))
                )
            ),
            (
                "email with DEL in the events string",
                claims(
                    Fixtures.claims(
                        events: #""{\"type\":\"email-enabled\",\"sub\":\"s\",\"event_time\":1,\"email\":\"a"#
                            + "\u{7F}" + #"@b\"}""#))
            ),
            (
                "email with DEL",
                claims(
                    Fixtures.claims(
                        events: event(Fixtures.event(type: #""email-enabled""#, extra: "\"email\":\"a\u{7F}@b\""))))
            ),
            (
                "email of 321 bytes",
                claims(
                    Fixtures.claims(
                        events: event(
                            Fixtures.event(
                                type: #""email-enabled""#, extra: "\"email\":\"\(String(repeating: "e", count: 321))\"")
                        )))
            ),
            (
                "email of 320 bytes",
                claims(
                    Fixtures.claims(
                        events: event(
                            Fixtures.event(
                                type: #""email-enabled""#, extra: "\"email\":\"\(String(repeating: "e", count: 320))\"")
                        )))
            ),
            (
                "is_private_email escaped",
                claims(
                    Fixtures.claims(
                        events: event(
                            Fixtures.event(
                                type: #""email-enabled""#, extra: #""email":"a@b","is_private_email":"tru\u0065""#))))
            ),
            (
                "sub of 256 bytes",
                claims(Fixtures.claims(events: event(Fixtures.event(sub: "\"\(String(repeating: "s", count: 256))\""))))
            ),
            (
                "sub of 255 bytes",
                claims(Fixtures.claims(events: event(Fixtures.event(sub: "\"\(String(repeating: "s", count: 255))\""))))
            ),
            ("jti of 256 bytes", claims(Fixtures.claims(jti: "\"\(String(repeating: "j", count: 256))\""))),
            ("jti with an escaped tab", claims(Fixtures.claims(jti: #""a\tb""#))),
            ("iss escaped", claims(Fixtures.claims(iss: #""https:\/\/appleid.apple.com""#))),
            ("nbf 1.5", claims(Fixtures.claims(extra: #""nbf":1.5"#))),
            ("nbf just in time", claims(Fixtures.claims(extra: #""nbf":\#(now + 60)"#))),
            (
                "whitespace variants between tokens",
                claims("{\t\"iss\"\r:\n" + String(base.dropFirst(#"{"iss":"#.count)))
            ),
        ]
        // Raw bytes a String cannot hold, in an unrelated member, a name and the events string.
        for (name, raw) in [
            ("overlong slash", [0xC0, 0xAF] as [UInt8]), ("surrogate as UTF-8", [0xED, 0xA0, 0x80]),
            ("lone continuation", [0x80]), ("truncated sequence", [0xE2, 0x82]), ("0xFF", [0xFF]),
            ("raw control", [0x01]), ("raw newline", [0x0A]), ("NUL", [0x00]),
        ] {
            let tail = Array(base.utf8.dropLast())
            cases.append(("\(name) in an unrelated value", tail + Array(#","x":"a"#.utf8) + raw + Array(#""}"#.utf8)))
            cases.append(("\(name) in an unrelated name", tail + Array(#","a"#.utf8) + raw + Array(#"":1}"#.utf8)))
            cases.append(("\(name) after the document", Array(base.utf8) + raw))
            cases.append(("\(name) as whitespace", Array("{".utf8) + raw + Array(base.utf8.dropFirst())))
            let events = Array(Fixtures.claims(events: nil).utf8.dropLast())
            cases.append(
                (
                    "\(name) in the events string",
                    events
                        + Array(
                            #","events":"{\"type\":\"consent-revoked\",\"sub\":\"s\",\"event_time\":1,\"x\":\"a"#.utf8)
                        + raw + Array(#"\"}"}"#.utf8)
                ))
        }
        return cases
    }()

    @Test("hostile Apple claims, signed: the fast path gives exactly what the strict steps give")
    func hostileAppleClaimsSigned() throws {
        var accepted = 0
        for (label, claims) in Self.hostileAppleClaims {
            if try Self.compareAppleSigned(claims: claims, label) { accepted += 1 }
        }
        // Some are meant to pass (the leeway, the 320-byte email, the other client ID...).
        #expect(accepted >= 8)
    }

    @Test("hostile headers, token text and bodies: the fast path gives exactly what the strict steps give")
    func hostileTokensAndBodies() throws {
        let claims = Array(Fixtures.claims().utf8)
        let keyID = Fixtures.primary.keyID
        let headers: [String] = [
            #"{"alg":"RS256","kid":"\#(keyID)","x":{"a":1,"a":2}}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","k\u0069d":"x"}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","crit":null}"#, #"{"alg":"RS256","kid":"\#(keyID)","crit":false}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","cr\u0069t":["exp"]}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","x":{"crit":1}}"#,
            #"{"alg":"RS256 ","kid":"\#(keyID)"}"#, #"{"alg":"rs256","kid":"\#(keyID)"}"#,
            #"{"alg":null,"kid":"\#(keyID)"}"#,
            #"{"alg":"RS256","kid":"\#(keyID)\u0000"}"#, "{\"alg\":\"RS256\",\"kid\":\"\(keyID)\u{7F}\"}",
            #"{"alg":"RS256","kid":"\#(String(repeating: "k", count: 256))"}"#,
            #"{"alg":"RS256","kid":"test-apple-key\u002d1"}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","typ":null}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","typ":"SECEVENT+JWT"}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","typ":"secevent+jwt "}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","typ":"Application/SecEvent+JWT"}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","typ":"application/jwt"}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","typ":["jwt"]}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","typ":"jwt","typ":"jwt"}"#,
            #"{"alg":"RS256","kid":"\#(keyID)","typ":"\u006awt"}"#,
            #"{"alg":"RS256","kid":"\#(keyID)"} "#, #"{"alg":"RS256","kid":"\#(keyID)"}x"#,
        ]
        for header in headers {
            try Self.compareAppleSigned(claims: claims, header: Array(header.utf8), "header \(header)")
            try Self.compareGoogleSigned(
                claims: Array(SecurityEventVerifierTests.claims().utf8), header: Array(header.utf8),
                "SET header \(header)")
        }
        for raw in [[0xC0, 0xAF], [0xED, 0xA0, 0x80], [0x80], [0x01]] as [[UInt8]] {
            let header = Array(#"{"alg":"RS256","kid":"\#(keyID)","x":""#.utf8) + raw + Array(#""}"#.utf8)
            try Self.compareAppleSigned(claims: claims, header: header, "header raw \(raw)")
        }

        let token = try Self.signed(header: Self.appleHeader, claims: claims)
        let segments = Fixtures.segments(token)
        let signature = segments[2]
        var tokens = [
            token + ".", token + ".x", "." + token, segments[0] + ".." + segments[1] + "." + signature,
            segments[0] + "." + segments[1] + ".", segments[0] + "." + segments[1],
            segments[0] + "=." + segments[1] + "." + signature, segments[0] + "." + segments[1] + "=." + signature,
            segments[0] + "." + segments[1] + "." + signature + "=",
            segments[0] + "." + segments[1] + "." + signature + "A",
            segments[0] + "." + segments[1] + "." + signature.dropLast(),
            segments[0] + "." + segments[1] + "."
                + signature.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/"),
        ]
        // Non-zero unused bits in each segment's last symbol (where its length leaves some).
        for index in 0..<3 where segments[index].count % 4 != 0 {
            var changed = segments
            var last = Array(changed[index].utf8)
            last[last.count - 1] = last[last.count - 1] == UInt8(ascii: "B") ? UInt8(ascii: "C") : UInt8(ascii: "B")
            changed[index] = String(decoding: last, as: UTF8.self)
            tokens.append(changed.joined(separator: "."))
        }
        for candidate in tokens {
            Differential.compareAppleBody(Fixtures.body(token: candidate), "token \(candidate.suffix(12))")
            Differential.compareGoogleToken(Array(candidate.utf8), "SET token \(candidate.suffix(12))")
        }

        // Bodies: duplicates at depth, escapes in other members, raw bytes, the size limit.
        let bodies: [[UInt8]] = [
            Array(#"{"payload":"\#(token)","o":{"k":1,"k":2}}"#.utf8),
            Array(#"{"o":[{"k":1,"k":2}],"payload":"\#(token)"}"#.utf8),
            Array(#"{"payload":"\#(token)","p\u0061yload":"x"}"#.utf8),
            Array(#"{"payload":"\#(token)","x":"\ud800"}"#.utf8),
            Array(#"{"payload":"\#(token)","x":"a"#.utf8) + [0xC0, 0xAF] + Array(#""}"#.utf8),
            Array(#"{"payload":"\#(token)"#.utf8) + [0x00] + Array(#""}"#.utf8),
            Array(#"{"payload":"\#(token)"}"#.utf8) + [0x00],
            Array(#"{"payload":"\#(token)"}"#.utf8) + [0xC2, 0xA0],
            [0xEF, 0xBB, 0xBF] + Array(#"{"payload":"\#(token)"}"#.utf8),
            Array(#"{"payload" "\#(token)"}"#.utf8), Array(#"{"payload":"\#(token)",}"#.utf8),
            Array(#"{"payload":"\#(token)"}}"#.utf8), Array(#"{"payload":["\#(token)"]}"#.utf8),
            Array(#"{"payload":"\#(token)\""}"#.utf8),
        ]
        for body in bodies { Differential.compareAppleBody(body, "body") }
        let exact = Array(#"{"payload":"\#(token)"}"#.utf8)
        let limit = NotificationVerifier.defaultMaximumBodyBytes
        let atLimit = exact + [UInt8](repeating: 0x20, count: limit - exact.count)
        let pastLimit = atLimit + [0x20]
        #expect(Differential.compareAppleBody(atLimit, "body at the limit"))
        #expect(!Differential.compareAppleBody(pastLimit, "body one byte past the limit"))
        let googleToken = Array(
            try TestSecurityEvent.signed(claims: SecurityEventVerifierTests.claims(), key: Fixtures.primary).utf8)
        let tooLong = SecurityEventVerifier(
            clientIDs: SecurityEventVerifierTests.verifier.clientIDs, maximumTokenBytes: googleToken.count - 1)
        #expect(throws: VerificationError.self) {
            try tooLong.verify(
                token: googleToken, keys: Fixtures.keys, issuer: SecurityEventVerifierTests.issuer, now: Self.now)
        }
    }

    @Test("hostile Google claims, signed: the fast path gives exactly what the strict steps give")
    func hostileGoogleClaimsSigned() throws {
        let risc = SecurityEventVerifierTests.risc
        let subject =
            #"{"subject":{"subject_type":"iss-sub","iss":"https://accounts.google.com/","sub":"7375626A656374"}}"#
        func claims(_ text: String) -> [UInt8] { Array(text.utf8) }
        func events(_ type: String, _ payload: String) -> String {
            SecurityEventVerifierTests.events(risc + type, payload)
        }
        let cases: [(String, [UInt8])] = [
            (
                "duplicate subject member",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: events(
                            "sessions-revoked", #"{"subject":{"subject_type":"iss-sub","iss":"x","sub":"1","sub":"2"}}"#
                        )))
            ),
            (
                "duplicate event spelt with \\u",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: "{\"\(risc)sessions-revoked\":\(subject),\"\(risc)sessions-revok\\u0065d\":\(subject)}")
                )
            ),
            ("duplicate iat spelt with \\u", claims(SecurityEventVerifierTests.claims(extra: #""\u0069at":1"#))),
            (
                "lone surrogate in an unrelated member",
                claims(SecurityEventVerifierTests.claims(extra: #""x":"\udfff""#))
            ),
            (
                "lone surrogate in the subject",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: events(
                            "sessions-revoked", #"{"subject":{"subject_type":"iss-sub","iss":"\ud800","sub":"1"}}"#)))
            ),
            ("iat 1.0", claims(SecurityEventVerifierTests.claims(iat: "\(Self.now - 30).0"))),
            ("iat -0", claims(SecurityEventVerifierTests.claims(iat: "-0"))),
            ("iat in the future", claims(SecurityEventVerifierTests.claims(iat: "\(Self.now + 61)"))),
            ("iat at the leeway", claims(SecurityEventVerifierTests.claims(iat: "\(Self.now + 60)"))),
            ("iat 19 digits", claims(SecurityEventVerifierTests.claims(iat: "1000000000000000000"))),
            ("aud unlisted", claims(SecurityEventVerifierTests.claims(aud: #""other.apps.googleusercontent.com""#))),
            ("aud array of empties", claims(SecurityEventVerifierTests.claims(aud: #"["",""]"#))),
            (
                "aud array with a number",
                claims(SecurityEventVerifierTests.claims(aud: "[\"\(SecurityEventVerifierTests.clientID)\",1]"))
            ),
            (
                "aud array with the client twice",
                claims(
                    SecurityEventVerifierTests.claims(
                        aud: "[\"\(SecurityEventVerifierTests.clientID)\",\"\(SecurityEventVerifierTests.clientID)\"]"))
            ),
            ("events a string", claims(SecurityEventVerifierTests.claims(events: #""{}""#))),
            ("events empty", claims(SecurityEventVerifierTests.claims(events: "{}"))),
            (
                "event type with DEL",
                claims(SecurityEventVerifierTests.claims(events: "{\"\(risc)sessions-revoked\u{7F}\":\(subject)}"))
            ),
            (
                "event type escaped",
                claims(
                    SecurityEventVerifierTests.claims(
                        events:
                            "{\"https:\\/\\/schemas.openid.net\\/secevent\\/risc\\/event-type\\/sessions-revoked\":\(subject)}"
                    ))
            ),
            (
                "subject_type and format disagree",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: events(
                            "sessions-revoked",
                            #"{"subject":{"subject_type":"iss-sub","format":"id_token_claims","iss":"x","sub":"1"}}"#)))
            ),
            (
                "subject_type null",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: events(
                            "sessions-revoked",
                            #"{"subject":{"subject_type":null,"format":"iss-sub","iss":"x","sub":"1"}}"#)))
            ),
            (
                "subject iss empty",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: events(
                            "sessions-revoked", #"{"subject":{"subject_type":"iss-sub","iss":"","sub":"1"}}"#)))
            ),
            (
                "subject sub with a brace",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: events(
                            "sessions-revoked", #"{"subject":{"subject_type":"iss-sub","iss":"x","sub":"a{b"}}"#)))
            ),
            (
                "reason with DEL",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: events(
                            "account-disabled",
                            "{\"subject\":{\"subject_type\":\"iss-sub\",\"iss\":\"x\",\"sub\":\"1\"},\"reason\":\"a\u{7F}\"}"
                        )))
            ),
            (
                "reason of 257 bytes",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: events(
                            "account-disabled",
                            "{\"subject\":{\"subject_type\":\"iss-sub\",\"iss\":\"x\",\"sub\":\"1\"},\"reason\":\"\(String(repeating: "r", count: 257))\"}"
                        )))
            ),
            (
                "state of 256 bytes",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: events("verification", "{\"state\":\"\(String(repeating: "s", count: 256))\"}")))
            ),
            (
                "state escaped",
                claims(SecurityEventVerifierTests.claims(events: events("verification", #"{"state":"a\/b"}"#)))
            ),
            (
                "state with a space",
                claims(SecurityEventVerifierTests.claims(events: events("verification", #"{"state":"a b"}"#)))
            ),
            (
                "sixteen events",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: "{" + (0..<16).map { "\"\(risc)x\($0)\":{}" }.joined(separator: ",") + "}"))
            ),
            (
                "seventeen events",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: "{" + (0..<17).map { "\"\(risc)x\($0)\":{}" }.joined(separator: ",") + "}"))
            ),
            (
                "two known events, sorted",
                claims(
                    SecurityEventVerifierTests.claims(
                        events: "{\"\(risc)sessions-revoked\":\(subject),\"\(risc)account-enabled\":\(subject)}"))
            ),
        ]
        var accepted = 0
        for (label, claims) in cases {
            if try Self.compareGoogleSigned(claims: claims, label) { accepted += 1 }
        }
        #expect(accepted >= 5)
    }
}
