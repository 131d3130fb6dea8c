import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The JSON-lines input of `reconcile` and `revoke`: a file, or standard input for `-`.
enum InputLines {
    /// Opens `input` for reading, or nil when it cannot be read.
    static func open(_ input: String) -> UnsafeMutablePointer<FILE>? {
        input == "-" ? fdopen(dup(0), "r") : fopen(input, "r")
    }

    /// Calls `handle` with each non-blank line (without its line end) and its number, until
    /// the input ends or `handle` returns an exit status. Returns that status, nil at the
    /// end, or 1 when reading failed (`failed` is told the line number first).
    static func each(
        _ file: UnsafeMutablePointer<FILE>, failed: (Int) -> Int32,
        _ handle: (_ bytes: [UInt8], _ lineNumber: Int) -> Int32?
    ) -> Int32? {
        var buffer: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(buffer) }
        var lineNumber = 0
        while true {
            let length = getline(&buffer, &capacity, file)
            guard length >= 0, let buffer else { break }
            lineNumber += 1
            var bytes = Array(UnsafeRawBufferPointer(start: buffer, count: length))
            while let last = bytes.last, last == 0x0A || last == 0x0D { bytes.removeLast() }
            if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            if let status = handle(bytes, lineNumber) { return status }
        }
        if ferror(file) != 0 { return failed(lineNumber + 1) }
        return nil
    }
}
