import Glibc

/// One request's FastCGI parameters, as nginx sent them: every `NAME=VALUE` entry copied
/// into one byte buffer at once (libfcgi's own copies die at the next accept or finish),
/// and looked up by name when asked.
///
/// A request reads about five of the twenty-odd parameters nginx sends; turning every
/// one into a `String` pair in a dictionary showed in the profile of every request.
struct FastCGIParameters: Sendable {
    /// The entries back to back, without separators.
    private var bytes: [UInt8] = []
    /// Per entry: where it starts, where its first `=` is, where it ends (offsets in `bytes`).
    private var entries: [(start: Int, equals: Int, end: Int)] = []

    init() {
        bytes.reserveCapacity(1024)
        entries.reserveCapacity(32)
    }

    init(_ dictionary: [String: String]) {
        self.init()
        for (name, value) in dictionary {
            var entry = Array(name.utf8)
            entry.append(UInt8(ascii: "="))
            entry.append(contentsOf: value.utf8)
            entry.withUnsafeBufferPointer { append(entry: $0) }
        }
    }

    /// Adds one `NAME=VALUE` entry; one without `=` is ignored.
    mutating func append(entry: UnsafeBufferPointer<UInt8>) {
        guard let equals = entry.firstIndex(of: UInt8(ascii: "=")) else { return }
        let start = bytes.count
        bytes.append(contentsOf: entry)
        entries.append((start, start + equals, start + entry.count))
    }

    /// The value of `name` (the last one, if nginx sent the name twice).
    func value(_ name: String) -> String? {
        var name = name
        return name.withUTF8 { wanted -> String? in
            bytes.withUnsafeBufferPointer { all -> String? in
                for entry in entries.reversed() where entry.equals - entry.start == wanted.count {
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
