/// Strict base64url (RFC 4648 §5) without padding, as JWS compact form requires.
///
/// Refuses `=`, `+`, `/`, whitespace, impossible lengths and non-zero unused
/// trailing bits, so each byte string has exactly one accepted encoding.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (value, symbol) in alphabet.enumerated() { table[Int(symbol)] = UInt8(value) }
        return table
    }()

    public static func encode<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        let input = Array(bytes)
        var output = [UInt8]()
        output.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(alphabet[Int(chunk >> 6 & 63)])
            output.append(alphabet[Int(chunk & 63)])
            index += 3
        }
        let remaining = input.count - index
        if remaining == 1 {
            let chunk = UInt32(input[index]) << 16
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
        } else if remaining == 2 {
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(alphabet[Int(chunk >> 6 & 63)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes strict unpadded base64url; nil when any rule is broken.
    public static func decode<Bytes: Collection<UInt8>>(_ text: Bytes) -> [UInt8]? {
        if let decoded = text.withContiguousStorageIfAvailable({ decode(buffer: $0) }) { return decoded }
        return Array(text).withUnsafeBufferPointer { decode(buffer: $0) }
    }

    /// The four positions of a quad, each symbol's six bits already shifted into place in a
    /// 24-bit group; an invalid symbol is bit 31 in every table, so one test after OR-ing
    /// the four finds it.
    private static let quadTables: [UInt32] = {
        var tables = [UInt32](repeating: 1 << 31, count: 4 * 256)
        for (value, symbol) in alphabet.enumerated() {
            for position in 0..<4 { tables[position * 256 + Int(symbol)] = UInt32(value) << (18 - 6 * position) }
        }
        return tables
    }()

    /// The length `text` of `count` symbols decodes to; nil for a length no strict
    /// unpadded encoding has.
    static func decodedCount(symbols count: Int) -> Int? {
        count % 4 == 1 ? nil : count / 4 * 3 + max(0, count % 4 - 1)
    }

    /// Decodes `input` (strict unpadded base64url, the same rules as `decode`) into `output`,
    /// which has room for `decodedCount(symbols: input.count)` bytes; false when a rule is
    /// broken. Without bounds checks or an array of its own: the verifier's fast path
    /// decodes a token's three segments into one buffer.
    static func decode(_ input: UnsafeBufferPointer<UInt8>, into output: UnsafeMutablePointer<UInt8>) -> Bool {
        guard decodedCount(symbols: input.count) != nil else { return false }
        guard var symbol = input.baseAddress else { return true }
        var out = output
        let wholeQuadsEnd = symbol + input.count / 4 * 4
        let allValid = quadTables.withUnsafeBufferPointer { quadBuffer in
            let quad = quadBuffer.baseAddress!
            while symbol < wholeQuadsEnd {
                let chunk =
                    quad[Int(symbol[0])] | quad[256 + Int(symbol[1])] | quad[512 + Int(symbol[2])]
                    | quad[768 + Int(symbol[3])]
                guard chunk & (1 << 31) == 0 else { return false }
                symbol += 4
                if symbol < wholeQuadsEnd {
                    // Three bytes in one four-byte store; the fourth is the next quad's first.
                    UnsafeMutableRawPointer(out).storeBytes(of: (chunk << 8).bigEndian, as: UInt32.self)
                } else {
                    out[0] = UInt8(truncatingIfNeeded: chunk >> 16)
                    out[1] = UInt8(truncatingIfNeeded: chunk >> 8)
                    out[2] = UInt8(truncatingIfNeeded: chunk)
                }
                out += 3
            }
            return true
        }
        guard allValid else { return false }
        return decodeTable.withUnsafeBufferPointer { tableBuffer in
            let table = tableBuffer.baseAddress!
            switch input.count % 4 {
            case 2:
                let a = table[Int(symbol[0])]
                let b = table[Int(symbol[1])]
                // Unused trailing bits must be zero: one encoding per byte string.
                guard (a | b) & 0x80 == 0, b & 0x0F == 0 else { return false }
                out[0] = a << 2 | b >> 4
            case 3:
                let a = table[Int(symbol[0])]
                let b = table[Int(symbol[1])]
                let c = table[Int(symbol[2])]
                guard (a | b | c) & 0x80 == 0, c & 0x03 == 0 else { return false }
                out[0] = a << 2 | b >> 4
                out[1] = b << 4 | c >> 2
            default: break
            }
            return true
        }
    }

    private static func decode(buffer input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let count = input.count
        guard count % 4 != 1 else { return nil }
        let outputCount = count / 4 * 3 + max(0, count % 4 - 1)
        return decodeTable.withUnsafeBufferPointer { table -> [UInt8]? in
            var valid = true
            let output = [UInt8](unsafeUninitializedCapacity: outputCount) { out, initialized in
                var inIndex = 0
                var outIndex = 0
                // Whole quads: an invalid symbol sets the high bit of its table entry (0xFF).
                while inIndex + 4 <= count {
                    let a = table[Int(input[inIndex])]
                    let b = table[Int(input[inIndex + 1])]
                    let c = table[Int(input[inIndex + 2])]
                    let d = table[Int(input[inIndex + 3])]
                    if (a | b | c | d) & 0x80 != 0 {
                        valid = false
                        break
                    }
                    let chunk = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    out[outIndex] = UInt8(truncatingIfNeeded: chunk >> 16)
                    out[outIndex + 1] = UInt8(truncatingIfNeeded: chunk >> 8)
                    out[outIndex + 2] = UInt8(truncatingIfNeeded: chunk)
                    inIndex += 4
                    outIndex += 3
                }
                let remaining = count - inIndex
                if valid, remaining >= 2 {
                    let a = table[Int(input[inIndex])]
                    let b = table[Int(input[inIndex + 1])]
                    let c = remaining == 3 ? table[Int(input[inIndex + 2])] : 0
                    if (a | b | c) & 0x80 != 0 {
                        valid = false
                    } else if remaining == 2 {
                        // Unused trailing bits must be zero: one encoding per byte string.
                        valid = b & 0x0F == 0
                        out[outIndex] = a << 2 | b >> 4
                        outIndex += 1
                    } else {
                        valid = c & 0x03 == 0
                        out[outIndex] = a << 2 | b >> 4
                        out[outIndex + 1] = b << 4 | c >> 2
                        outIndex += 2
                    }
                }
                initialized = valid ? outIndex : 0
            }
            return valid ? output : nil
        }
    }
}
