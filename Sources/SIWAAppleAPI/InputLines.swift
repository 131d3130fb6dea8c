import Foundation
import SIWASupport

#if canImport(Glibc)
    import Glibc
#endif

/// The line input of the batch commands (`reconcile`, `revoke`, `transfer`): a file, or
/// standard input for `-`.
public enum InputLines {
    /// Opens `input` for reading, or nil when it cannot be read.
    public static func open(_ input: String) -> UnsafeMutablePointer<FILE>? {
        input == "-" ? fdopen(dup(0), "r") : fopen(input, "r")
    }

    /// Calls `handle` with each non-blank line (without its line end) and its number, until
    /// the input ends or `handle` stops the run. Reading that fails stops it too (exit 1,
    /// naming the line).
    public static func each(
        _ file: UnsafeMutablePointer<FILE>,
        _ handle: (_ bytes: [UInt8], _ lineNumber: Int) throws(BatchRun.Stop) -> Void
    ) throws(BatchRun.Stop) {
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
            try handle(bytes, lineNumber)
        }
        if ferror(file) != 0 {
            throw BatchRun.Stop(status: .failed, message: "reading the input failed at line \(lineNumber + 1)")
        }
    }
}
