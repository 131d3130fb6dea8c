#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One member of an object the `PlainJSONReader` read: where its name and value lie in the
/// bytes, and what kind of value it is. Nothing is copied: a check compares the bytes in
/// place, and only what leaves the verifier becomes a `String`.
/// Equal when the same name, kind and value, where they lie.
struct PlainJSONMember: Equatable {
    enum Kind: UInt8 {
        /// A string without escapes: the value's bytes are its text.
        case string
        /// A string with one-character escapes (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`,
        /// `\t`); `PlainJSONReader.unescape` writes its text.
        case escapedString
        /// An integer of at most 18 digits, in `integer`.
        case integer
        case trueValue, falseValue, null
        /// The value's bytes run from `{` or `[` to just after the closing bracket.
        case object, array
    }

    var nameStart = 0
    var nameEnd = 0
    var kind = Kind.null
    /// For strings, the bytes between the quotes.
    var valueStart = 0
    var valueEnd = 0
    var integer: Int64 = 0
}

/// A reader for the plain JSON of the tokens this service verifies, beside
/// `StrictJSONParser`: it reads only what it fully understands and says nil ("not
/// mine") for anything else, so that every refusal and every unusual document is still
/// answered by the strict parser, with its codes and messages.
///
/// Understood: objects and arrays at most `maximumDepth` deep, objects of at most
/// `maximumMembers` members with distinct names written without escapes; strings of
/// printable ASCII with one-character escapes (no `\u`, no byte of 0x80 or above, so there
/// is no UTF-8 to validate and no surrogate to pair); integers of at most 18 digits
/// without fraction or exponent; `true`, `false`, `null`; the four JSON whitespace bytes.
/// Whatever it accepts, the strict parser accepts with the same members and values: a
/// duplicate name (even one spelt with escapes, since names with escapes are not
/// understood), invalid UTF-8, a lone surrogate, depth, trailing bytes are all left to it.
struct PlainJSONReader {
    static let maximumMembers = 16
    static let maximumDepth = 8

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index: Int
    private let end: Int
    /// True when an earlier read of these bytes read the object whole (`withReadObject`):
    /// its names are not compared again, and its nested values are passed over, not read.
    private let readBefore: Bool

    private init(bytes: UnsafeBufferPointer<UInt8>, range: Range<Int>, readBefore: Bool = false) {
        self.bytes = bytes
        self.index = range.lowerBound
        self.end = range.upperBound
        self.readBefore = readBefore
    }

    /// The members of the one object that fills `range` of `bytes` (whitespace around it
    /// allowed), written into `members`; nil when the text is not plain JSON as above.
    static func readObject(
        _ bytes: UnsafeBufferPointer<UInt8>, in range: Range<Int>,
        into members: UnsafeMutableBufferPointer<PlainJSONMember>, readBefore: Bool = false
    ) -> Int? {
        precondition(members.count >= maximumMembers)
        var reader = PlainJSONReader(bytes: bytes, range: range, readBefore: readBefore)
        reader.skipWhitespace()
        guard reader.index < reader.end, bytes[reader.index] == UInt8(ascii: "{"),
            let count = reader.readObject(depth: 1, into: members)
        else { return nil }
        reader.skipWhitespace()
        return reader.index == reader.end ? count : nil
    }

    /// `readObject` with room for the members on the stack.
    static func withObject<Result>(
        _ bytes: UnsafeBufferPointer<UInt8>, in range: Range<Int>,
        _ body: (UnsafeBufferPointer<PlainJSONMember>) -> Result?
    ) -> Result? {
        withUnsafeTemporaryAllocation(of: PlainJSONMember.self, capacity: maximumMembers) { storage in
            guard let count = readObject(bytes, in: range, into: storage) else { return nil }
            return body(UnsafeBufferPointer(rebasing: storage[0..<count]))
        }
    }

    /// `withObject` for an object this reader has already read whole, as the value of a
    /// member (`.object`) of an object read from the same bytes: the same members, without
    /// reading the object's nested values a second time (Google's events, event and subject
    /// are objects within objects). Only for such a range: anything else would be taken
    /// without its nested values checked.
    static func withReadObject<Result>(
        _ bytes: UnsafeBufferPointer<UInt8>, in range: Range<Int>,
        _ body: (UnsafeBufferPointer<PlainJSONMember>) -> Result?
    ) -> Result? {
        withUnsafeTemporaryAllocation(of: PlainJSONMember.self, capacity: maximumMembers) { storage in
            guard let count = readObject(bytes, in: range, into: storage, readBefore: true) else { return nil }
            // In debug builds (the tests'), the precondition checked: read whole, the range
            // gives the same members.
            assert(
                withUnsafeTemporaryAllocation(of: PlainJSONMember.self, capacity: maximumMembers) { whole in
                    readObject(bytes, in: range, into: whole) == count
                        && whole[0..<count].elementsEqual(storage[0..<count])
                }, "withReadObject on a range no earlier read read whole")
            return body(UnsafeBufferPointer(rebasing: storage[0..<count]))
        }
    }

    /// The string elements of a plain array (the range `readObject` gave for it), or nil when
    /// an element is not a string without escapes.
    static func stringElements(_ bytes: UnsafeBufferPointer<UInt8>, of range: Range<Int>) -> [Range<Int>]? {
        var reader = PlainJSONReader(bytes: bytes, range: range)
        var elements: [Range<Int>] = []
        reader.index += 1
        reader.skipWhitespace()
        if reader.index < reader.end, bytes[reader.index] == UInt8(ascii: "]") { return elements }
        while reader.index < reader.end {
            guard bytes[reader.index] == UInt8(ascii: "\""), let string = reader.readString(), !string.escaped
            else { return nil }
            elements.append(string.start..<string.end)
            reader.skipWhitespace()
            guard reader.index < reader.end else { return nil }
            if bytes[reader.index] == UInt8(ascii: "]") { return elements }
            guard bytes[reader.index] == UInt8(ascii: ",") else { return nil }
            reader.index += 1
            reader.skipWhitespace()
        }
        return nil
    }

    /// Room `unescape` needs for a value of `count` bytes: it copies eight bytes at a time
    /// and may write up to seven past the text's end.
    static func unescapeCapacity(_ count: Int) -> Int { count + 8 }

    /// Writes the text of an `escapedString` value into `output` (of at least
    /// `unescapeCapacity` bytes) and returns its length. Only for values this reader
    /// accepted: every backslash starts a one-character escape.
    static func unescape(
        _ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, into output: UnsafeMutableBufferPointer<UInt8>
    ) -> Int {
        precondition(output.count >= unescapeCapacity(range.count))
        let source = bytes.baseAddress!
        let target = UnsafeMutableRawPointer(output.baseAddress!)
        var written = 0
        var index = range.lowerBound
        while index < range.upperBound {
            if index + 8 <= range.upperBound {
                // The run up to the next backslash, a word at a time.
                let word = UnsafeRawPointer(source + index).loadUnaligned(as: UInt64.self)
                target.storeBytes(of: word, toByteOffset: written, as: UInt64.self)
                let backslashes = backslashBytes(UInt64(littleEndian: word))
                let run = backslashes == 0 ? 8 : backslashes.trailingZeroBitCount >> 3
                index += run
                written += run
                if run == 8 { continue }
            }
            var byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "\\") {
                switch bytes[index] {
                case UInt8(ascii: "b"): byte = 0x08
                case UInt8(ascii: "f"): byte = 0x0C
                case UInt8(ascii: "n"): byte = 0x0A
                case UInt8(ascii: "r"): byte = 0x0D
                case UInt8(ascii: "t"): byte = 0x09
                default: byte = bytes[index]  // `"`, `\` or `/`: the byte itself
                }
                index += 1
            }
            output[written] = byte
            written += 1
        }
        return written
    }

    private mutating func skipWhitespace() {
        while index < end {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// An object from its `{`; each name is compared with the earlier ones as bytes.
    private mutating func readObject(depth: Int, into members: UnsafeMutableBufferPointer<PlainJSONMember>) -> Int? {
        guard depth <= Self.maximumDepth else { return nil }
        index += 1
        skipWhitespace()
        if index < end, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return 0
        }
        var count = 0
        while count < Self.maximumMembers {
            guard index < end, bytes[index] == UInt8(ascii: "\""), let name = readString(), !name.escaped else {
                return nil
            }
            if !readBefore {
                for earlier in 0..<count where hasSameBytes(members[earlier], name.start, name.end) { return nil }
            }
            skipWhitespace()
            guard index < end, bytes[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            skipWhitespace()
            guard var member = readValue(depth: depth) else { return nil }
            member.nameStart = name.start
            member.nameEnd = name.end
            members[count] = member
            count += 1
            skipWhitespace()
            guard index < end else { return nil }
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return count
            }
            guard bytes[index] == UInt8(ascii: ",") else { return nil }
            index += 1
            skipWhitespace()
        }
        return nil
    }

    /// By `sameBytes` past the length: a sender may write 16 long names differing only at
    /// the end, and each is compared with every earlier one (at most 15 times the object's
    /// size, compared a word at a time).
    private func hasSameBytes(_ member: PlainJSONMember, _ start: Int, _ end: Int) -> Bool {
        guard member.nameEnd - member.nameStart == end - start else { return false }
        guard end > start, let base = bytes.baseAddress else { return true }
        return Self.sameBytes(base + member.nameStart, base + start, count: end - start)
    }

    /// Whether `count` bytes at `first` and at `second` are the same: eight at a time, then
    /// the rest one by one. Inline rather than `memcmp`: what the verifier compares (names,
    /// an issuer, a client ID) is a few dozen bytes at most, shorter than a call costs.
    @inline(__always)
    static func sameBytes(_ first: UnsafePointer<UInt8>, _ second: UnsafePointer<UInt8>, count: Int) -> Bool {
        var offset = 0
        while offset + 8 <= count {
            let firstWord = UnsafeRawPointer(first + offset).loadUnaligned(as: UInt64.self)
            let secondWord = UnsafeRawPointer(second + offset).loadUnaligned(as: UInt64.self)
            guard firstWord == secondWord else { return false }
            offset += 8
        }
        while offset < count {
            guard first[offset] == second[offset] else { return false }
            offset += 1
        }
        return true
    }

    /// One value; for an object or array, checked whole (a nested object's names too).
    private mutating func readValue(depth: Int) -> PlainJSONMember? {
        guard index < end else { return nil }
        var member = PlainJSONMember()
        member.valueStart = index
        switch bytes[index] {
        case UInt8(ascii: "\""):
            guard let string = readString() else { return nil }
            member.kind = string.escaped ? .escapedString : .string
            member.valueStart = string.start
            member.valueEnd = string.end
            return member
        case UInt8(ascii: "{") where readBefore:
            guard passReadValue() else { return nil }
            member.kind = .object
        case UInt8(ascii: "[") where readBefore:
            guard passReadValue() else { return nil }
            member.kind = .array
        case UInt8(ascii: "{"):
            let read = withUnsafeTemporaryAllocation(of: PlainJSONMember.self, capacity: Self.maximumMembers) {
                readObject(depth: depth + 1, into: $0)
            }
            guard read != nil else { return nil }
            member.kind = .object
        case UInt8(ascii: "["):
            guard readArray(depth: depth + 1) else { return nil }
            member.kind = .array
        case UInt8(ascii: "t"):
            guard readLiteral("true") else { return nil }
            member.kind = .trueValue
        case UInt8(ascii: "f"):
            guard readLiteral("false") else { return nil }
            member.kind = .falseValue
        case UInt8(ascii: "n"):
            guard readLiteral("null") else { return nil }
            member.kind = .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            guard let value = readInteger() else { return nil }
            member.kind = .integer
            member.integer = value
        default: return nil
        }
        member.valueEnd = index
        return member
    }

    /// Moves past the object or array at `index`, which an earlier read of these bytes read
    /// whole: the brackets counted, each string passed by `readString` (a bracket inside a
    /// string is text). Bounded by `end` like every other step.
    private mutating func passReadValue() -> Bool {
        var depth = 0
        while index < end {
            switch bytes[index] {
            case UInt8(ascii: "\""):
                guard readString() != nil else { return false }
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                index += 1
                if depth == 0 { return true }
            default: index += 1
            }
        }
        return false
    }

    private mutating func readArray(depth: Int) -> Bool {
        guard depth <= Self.maximumDepth else { return false }
        index += 1
        skipWhitespace()
        if index < end, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return true
        }
        while true {
            guard readValue(depth: depth) != nil else { return false }
            skipWhitespace()
            guard index < end else { return false }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return true
            }
            guard bytes[index] == UInt8(ascii: ",") else { return false }
            index += 1
            skipWhitespace()
        }
    }

    private mutating func readLiteral(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard end - index >= count else { return false }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != start[offset] { return false }
        index += count
        return true
    }

    /// `-?(0|[1-9][0-9]*)` of at most 18 digits (so it fits in 64 bits), not followed by a
    /// fraction or an exponent (those are the strict parser's).
    private mutating func readInteger() -> Int64? {
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let digitsStart = index
        var value: Int64 = 0
        while index < end, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
            // The bound before the multiplication: eighteen digits always fit in Int64, a
            // nineteenth may not, and an overflow here would trap on unauthenticated bytes.
            guard index - digitsStart < 18 else { return nil }
            value = value * 10 + Int64(bytes[index] - UInt8(ascii: "0"))
            index += 1
        }
        let digits = index - digitsStart
        guard digits > 0, digits == 1 || bytes[digitsStart] != UInt8(ascii: "0") else { return nil }
        if index < end, bytes[index] == UInt8(ascii: ".") || bytes[index] | 0x20 == UInt8(ascii: "e") {
            return nil
        }
        return negative ? -value : value
    }

    /// A string from its opening quote: where its bytes lie and whether it holds escapes.
    /// Eight bytes at a time (as the strict parser) to the first quote, backslash, control
    /// byte or byte of 0x80 or above, found in the word by its lowest flagged byte (the
    /// borrow of the zero-byte test can flag only bytes after a true one, never before);
    /// byte by byte only in the last few bytes of the document.
    private mutating func readString() -> (start: Int, end: Int, escaped: Bool)? {
        index += 1
        let start = index
        var escaped = false
        let base = bytes.baseAddress!
        while true {
            while index + 8 <= end {
                let special = Self.specialBytes(
                    UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)))
                if special != 0 {
                    index += special.trailingZeroBitCount >> 3
                    break
                }
                index += 8
            }
            guard index < end else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "\""):
                index += 1
                return (start, index - 1, escaped)
            case UInt8(ascii: "\\"):
                guard index + 1 < end else { return nil }
                switch bytes[index + 1] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                    UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    escaped = true
                    index += 2
                default: return nil
                }
            case 0x20..<0x80: index += 1
            default: return nil
            }
        }
    }

    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highBits: UInt64 = 0x8080_8080_8080_8080

    /// The high bit of each byte of `word` that is a quote, a backslash, a control byte or
    /// 0x80 and above (and possibly of bytes after the first such one).
    private static func specialBytes(_ word: UInt64) -> UInt64 {
        let quotes = word ^ (ones &* UInt64(UInt8(ascii: "\"")))
        let backslashes = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
        let hasQuote = (quotes &- ones) & ~quotes & highBits
        let hasBackslash = (backslashes &- ones) & ~backslashes & highBits
        let hasControl = (word &- ones &* 0x20) & ~word & highBits
        return hasQuote | hasBackslash | hasControl | (word & highBits)
    }

    /// The high bit of each byte of `word` that is a backslash (and possibly of bytes after
    /// the first one).
    private static func backslashBytes(_ word: UInt64) -> UInt64 {
        let backslashes = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
        return (backslashes &- ones) & ~backslashes & highBits
    }
}

extension UnsafeBufferPointer<UInt8> {
    /// Whether the bytes in `range` are exactly `expected`'s UTF-8. Always inlined, so the
    /// literal's length and bytes are constants where it is called.
    @inline(__always)
    func bytes(_ range: Range<Int>, equal expected: StaticString) -> Bool {
        // Inline, not memcmp: the names compared are a few bytes, most differ in the first.
        let count = expected.utf8CodeUnitCount
        guard range.count == count else { return false }
        let start = expected.utf8Start
        for offset in 0..<count where self[range.lowerBound + offset] != start[offset] { return false }
        return true
    }

    /// Whether the bytes in `range` are exactly `expected`'s UTF-8. Named apart from the
    /// `StaticString` one above: with one name, a literal would pick this one (`String` is
    /// a literal's default type) and every name compared would become a `String` first.
    func bytes(_ range: Range<Int>, equalText expected: String) -> Bool {
        // The string's own bytes where they lie (a native or small string always has them),
        // the count first: most values compared differ in it.
        let count = range.count
        let same = expected.utf8.withContiguousStorageIfAvailable { other in
            other.count == count
                && (count == 0
                    || PlainJSONReader.sameBytes(baseAddress! + range.lowerBound, other.baseAddress!, count: count))
        }
        if let same { return same }
        return expected.utf8.elementsEqual(UnsafeBufferPointer(rebasing: self[range]))
    }

    func string(_ range: Range<Int>) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: self[range]), as: UTF8.self)
    }
}
