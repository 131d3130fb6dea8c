import Glibc

/// One request's FastCGI parameters, read once from the bytes of its PARAMS stream by the
/// acceptor (`init(reading:)`), before any worker is involved, and handed to the worker
/// with the connection: what decides whether a request is answered at once (its declared
/// length) and what the handler is given are one reading, so the two can never disagree.
/// libfcgi still consumes the same records, but its own copies are never looked at.
///
/// Kept as every `NAME=VALUE` entry back to back in one byte buffer, looked up by name
/// when asked: a request reads about five of the twenty-odd parameters nginx sends, and
/// turning every one into a `String` pair in a dictionary showed in the profile of every
/// request.
struct FastCGIParameters: Sendable {
    /// The entries back to back, without separators.
    private var bytes: [UInt8] = []
    /// Per entry: where it starts, where the `=` after its name is, where it ends (offsets
    /// in `bytes`).
    private var entries: [(start: Int, equals: Int, end: Int)] = []

    /// The most significant digits a `CONTENT_LENGTH` may have: 18 never overflow an `Int`.
    static let longestLength = 18

    init() {
        bytes.reserveCapacity(1024)
        entries.reserveCapacity(32)
    }

    /// Parameters a caller already has (a test, a handler's own request): names and values as given.
    init(_ dictionary: [String: String]) {
        self.init()
        for (name, value) in dictionary { append(name: Array(name.utf8), value: Array(value.utf8)) }
    }

    /// Reads a request's whole PARAMS stream (the contents of its PARAMS records, joined):
    /// name-value pairs, each length one byte, or four with the high bit set. Refused
    /// (nginx never sends any of them, and each could make two readers disagree):
    /// - a pair cut short by the end of the stream (`malformedParameters`);
    /// - a name with a control byte (NUL to 0x1F, DEL) or `=` (`invalidParameterName`):
    ///   `CONTENT_LENGTH=10` plus a NUL was read as `CONTENT_LENGTH` by C string code;
    /// - a name sent twice (`duplicateParameter`), but for `HTTP_*` names: nginx before
    ///   1.23 sends a request header line a client repeated as a parameter of its own, so
    ///   those are joined as nginx 1.23 and later joins them (`, `, and `; ` for cookies),
    ///   and a client's repeated header never closes the connection nginx counts as an
    ///   upstream error. The endpoint reads none of them;
    /// - a `CONTENT_LENGTH` that is neither empty (nginx's value without a body) nor at
    ///   most 18 significant ASCII digits (`invalidContentLength`): leading zeros are
    ///   taken, since nginx passes a client's `Content-Length` as written and accepts them.
    init(reading stream: ArraySlice<UInt8>) throws(FastCGIRefusal) {
        // Ranges in `stream`, no copy and no allocation per pair: this runs on the one
        // thread that accepts every connection.
        var names: [Range<Int>] = []
        var values: [Range<Int>] = []
        names.reserveCapacity(32)
        values.reserveCapacity(32)
        // Later values of a repeated `HTTP_*` name, by the index of its first pair.
        var repeats: [(pair: Int, value: Range<Int>)] = []
        var index = NameIndex()
        var offset = stream.startIndex
        func length() throws(FastCGIRefusal) -> Int {
            guard offset < stream.endIndex else { throw .malformedParameters }
            if stream[offset] & 0x80 == 0 {
                offset += 1
                return Int(stream[offset - 1])
            }
            guard stream.endIndex - offset >= 4 else { throw .malformedParameters }
            let value =
                Int(stream[offset] & 0x7f) << 24 | Int(stream[offset + 1]) << 16 | Int(stream[offset + 2]) << 8
                | Int(stream[offset + 3])
            offset += 4
            return value
        }
        while offset < stream.endIndex {
            let nameLength = try length()
            let valueLength = try length()
            guard stream.endIndex - offset >= nameLength + valueLength else { throw .malformedParameters }
            let name = offset..<(offset + nameLength)
            let value = name.upperBound..<(name.upperBound + valueLength)
            offset = value.upperBound
            guard !stream[name].contains(where: { $0 < 0x20 || $0 == 0x7f || $0 == UInt8(ascii: "=") }) else {
                throw .invalidParameterName
            }
            if let earlier = index.earlier(stream[name], names: names, in: stream) {
                guard stream[name].starts(with: Self.headerPrefix) else { throw .duplicateParameter }
                repeats.append((earlier, value))
            } else {
                names.append(name)
                values.append(value)
            }
        }
        self.init()
        bytes.reserveCapacity(stream.count + names.count)
        // Grouped by their first pair, in stream order (`value.lowerBound`) within each.
        repeats.sort { ($0.pair, $0.value.lowerBound) < ($1.pair, $1.value.lowerBound) }
        var nextRepeat = 0
        for pair in names.indices {
            let start = bytes.count
            bytes.append(contentsOf: stream[names[pair]])
            let equals = bytes.count
            bytes.append(UInt8(ascii: "="))
            bytes.append(contentsOf: stream[values[pair]])
            while nextRepeat < repeats.count, repeats[nextRepeat].pair == pair {
                // As nginx 1.23 joins a repeated header line: cookies with "; ".
                let separator = stream[names[pair]].elementsEqual("HTTP_COOKIE".utf8) ? "; " : ", "
                bytes.append(contentsOf: separator.utf8)
                bytes.append(contentsOf: stream[repeats[nextRepeat].value])
                nextRepeat += 1
            }
            entries.append((start, equals, bytes.count))
        }
        if let declared = value("CONTENT_LENGTH"), !declared.isEmpty, Self.parseLength(declared) == nil {
            throw .invalidContentLength
        }
    }

    /// Finds a name among those read so far: by comparing while they are few (nginx sends
    /// twenty-odd), by a dictionary built once they are many (a peer's thousands of names
    /// then cost a hash each, not a comparison with every earlier one).
    private struct NameIndex {
        private static let linearLimit = 32
        private var byName: [Name: Int] = [:]

        /// A name hashed as one run of bytes (an `ArraySlice`'s own hash takes them one by one).
        private struct Name: Hashable {
            let bytes: ArraySlice<UInt8>

            func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
            static func == (left: Name, right: Name) -> Bool { left.bytes.elementsEqual(right.bytes) }
        }

        /// The index in `names` of an earlier pair named `name`; else nil, and `name` (about
        /// to be appended to `names`) is remembered.
        mutating func earlier(_ name: ArraySlice<UInt8>, names: [Range<Int>], in stream: ArraySlice<UInt8>) -> Int? {
            if names.count < Self.linearLimit {
                return names.firstIndex { $0.count == name.count && stream[$0].elementsEqual(name) }
            }
            if byName.isEmpty {
                for (position, earlier) in names.enumerated() { byName[Name(bytes: stream[earlier])] = position }
            }
            if let found = byName[Name(bytes: name)] { return found }
            byName[Name(bytes: name)] = names.count
            return nil
        }
    }

    /// The prefix nginx gives the parameters it makes of request header lines.
    private static let headerPrefix = Array("HTTP_".utf8)

    /// One entry from a caller's name and value.
    private mutating func append(name: [UInt8], value: [UInt8]) {
        let start = bytes.count
        bytes.append(contentsOf: name)
        let equals = bytes.count
        bytes.append(UInt8(ascii: "="))
        bytes.append(contentsOf: value)
        entries.append((start, equals, bytes.count))
    }

    /// The value of `name`, nil when it was not sent.
    func value(_ name: String) -> String? {
        var name = name
        return name.withUTF8 { wanted -> String? in
            bytes.withUnsafeBufferPointer { all -> String? in
                for entry in entries where entry.equals - entry.start == wanted.count {
                    if wanted.isEmpty
                        || memcmp(all.baseAddress! + entry.start, wanted.baseAddress!, wanted.count) == 0
                    {
                        return String(decoding: all[(entry.equals + 1)..<entry.end], as: UTF8.self)
                    }
                }
                return nil
            }
        }
    }

    /// `CONTENT_LENGTH` as a number; nil when absent or empty (`init(reading:)` refused any
    /// other value that is not one).
    var contentLength: Int? { value("CONTENT_LENGTH").flatMap(Self.parseLength) }

    /// Strict: ASCII digits only, no sign, no spaces; at most 18 digits once leading zeros
    /// are set aside (no overflow).
    static func parseLength(_ text: String) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        let significant = text.utf8.drop { $0 == 0x30 }
        guard significant.count <= longestLength else { return nil }
        return significant.reduce(0) { $0 * 10 + Int($1 - 0x30) }
    }

    /// Every parameter, by name.
    var dictionary: [String: String] {
        var result: [String: String] = [:]
        for entry in entries {
            let name = String(decoding: bytes[entry.start..<entry.equals], as: UTF8.self)
            result[name] = String(decoding: bytes[(entry.equals + 1)..<entry.end], as: UTF8.self)
        }
        return result
    }
}

/// The acceptor's reading of a connection's first bytes, for the fuzz target (package
/// code, outside this module): how far the request has come, and its parameters by name
/// or why they were refused.
package enum FastCGIRequestReading {
    package struct Look: Equatable {
        package let state: String
        /// Nil until the parameters are complete.
        package let parameters: Result<[String: String], FastCGIRefusal>?
        package let contentLength: Int?
    }

    package static func look(_ bytes: [UInt8]) -> Look {
        let inspection = FastCGIAcceptor.inspect(bytes[...])
        let parameters = inspection.parameters.map { $0.map(\.dictionary) }
        let contentLength = (try? inspection.parameters?.get())?.contentLength
        return Look(state: "\(inspection.state)", parameters: parameters, contentLength: contentLength)
    }

    /// A PARAMS stream's pairs read on their own, by name.
    package static func read(_ stream: [UInt8]) -> Result<[String: String], FastCGIRefusal> {
        Result { () throws(FastCGIRefusal) in try FastCGIParameters(reading: stream[...]).dictionary }
    }
}
