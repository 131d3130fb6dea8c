import Foundation
import SIWAHTTPS
import SIWASupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The last good JWKS on disk, so a restart without network still has Apple's keys.
///
/// A write is atomic and durable: a temporary file in the same directory is
/// written and fsynced, renamed over the old one, and the directory is fsynced,
/// so a crash leaves either the old document or the new one, never a torn file.
/// The file's modification time is the time the document was fetched.
public struct JWKSCacheFile: Sendable {
    public let path: String
    /// The largest file loaded; larger than any JWKS the fetcher accepts.
    public let maximumBytes: Int

    public init(path: String, maximumBytes: Int = HTTPSFetcher.defaultMaximumBytes) {
        self.path = path
        self.maximumBytes = maximumBytes
    }

    /// The cached document and when it was written (Unix seconds); nil when there is no file.
    ///
    /// Only a regular file is read. The open neither blocks (a FIFO put at the path would
    /// hang start-up, or a SIGHUP reload, until someone writes into it) nor follows a
    /// symbolic link; the type is then checked on the open descriptor, so nothing can be
    /// swapped in between.
    public func load() throws(JWKSCacheFileError) -> (bytes: [UInt8], writtenAt: Int64)? {
        let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else {
            let error = errno
            if error == ENOENT { return nil }
            if error == ELOOP {
                throw JWKSCacheFileError(.notRegularFile, "\(path) is a symbolic link; only a regular file is read")
            }
            throw JWKSCacheFileError(.readFailed, "cannot open \(path): \(Self.describe(error))")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw JWKSCacheFileError(.readFailed, "cannot stat \(path): \(Self.describe(errno))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw JWKSCacheFileError(.notRegularFile, "\(path) is not a regular file; only a regular file is read")
        }
        guard status.st_size <= maximumBytes else {
            throw JWKSCacheFileError(.tooLarge, "\(path) is \(status.st_size) bytes, over \(maximumBytes)")
        }
        let data: Data?
        do { data = try handle.read(upToCount: maximumBytes + 1) } catch {
            throw JWKSCacheFileError(.readFailed, "cannot read \(path)")
        }
        let bytes = [UInt8](data ?? Data())
        guard bytes.count <= maximumBytes else {
            throw JWKSCacheFileError(.tooLarge, "\(path) is over \(maximumBytes) bytes")
        }
        return (bytes, Int64(status.st_mtim.tv_sec))
    }

    /// Replaces the cached document atomically and durably.
    public func store(_ bytes: [UInt8]) throws(JWKSCacheFileError) {
        let directory = Self.directory(of: path)
        do throws(DurableFile.Failure) {
            // Created 0644 under the umask, as before; a name of its own per write.
            _ = try DurableFile.write(
                path, bytes, mode: 0o644, exactMode: false, directory: directory,
                temporary: "\(path).tmp-\(getpid())-\(Self.nextSuffix())")
        } catch {
            throw JWKSCacheFileError(.writeFailed, error.message)
        }
    }

    private static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    private static func describe(_ error: Int32) -> String { String(cString: strerror(error)) }

    private static let suffixCounter = Mutex<Int>(0)

    private static func nextSuffix() -> Int {
        suffixCounter.withLock { value in
            value += 1
            return value
        }
    }
}
