#if canImport(Glibc)
    import Glibc
#endif

/// Files written whole and durably: under a temporary name, fsynced, renamed into place, the
/// directory fsynced. The spool's segments and the JWKS cache file are written through it;
/// every errno it meets becomes a `Failure` naming the file and the system error.
public enum DurableFile {
    /// What failed, with the system error's text (`cannot fsync /x: No space left (errno 28)`).
    public struct Failure: Error, Sendable {
        public let message: String
        public let errorNumber: Int32
    }

    /// Which file a path or a descriptor names: a rename keeps it, a re-creation changes it.
    public struct Identity: Equatable, Sendable {
        let device: UInt64
        let inode: UInt64
    }

    /// The suffix of a file written whole before it is renamed into place.
    public static let temporarySuffix = ".tmp"

    /// The one durable writer: writes `bytes` to a new file `temporary` (created with
    /// `mode`, given exactly that mode when `exactMode`), sets its modification time to
    /// `modified` if given, fsyncs it, renames it onto `path` and fsyncs `directory`. After a
    /// crash `path` holds the old contents or the new, never part of them. With `replacing`,
    /// the rename happens only while `path` still names that file; returns whether it renamed.
    public static func write(
        _ path: String, _ bytes: [UInt8], mode: mode_t, exactMode: Bool = true, directory: String,
        temporary: String? = nil, modified: timespec? = nil, replacing: Identity? = nil
    ) throws(Failure) -> Bool {
        let temporary = temporary ?? path + temporarySuffix
        unlink(temporary)
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw failure("cannot create \(temporary)") }
        do throws(Failure) {
            if exactMode {
                guard fchmod(descriptor, mode) == 0 else { throw failure("cannot set mode on \(temporary)") }
            }
            try writeAll(descriptor, bytes, path: temporary)
            if let modified {
                var times = [modified, modified]
                guard futimens(descriptor, &times) == 0 else {
                    throw failure("cannot set the time of \(temporary)")
                }
            }
            guard fsync(descriptor) == 0 else { throw failure("cannot fsync \(temporary)") }
        } catch {
            Glibc.close(descriptor)
            unlink(temporary)
            throw error
        }
        Glibc.close(descriptor)
        if let replacing, identity(at: path) != replacing {
            unlink(temporary)
            return false
        }
        guard rename(temporary, path) == 0 else {
            let error = failure("cannot rename \(temporary) to \(path)")
            unlink(temporary)
            throw error
        }
        try syncDirectory(directory)
        return true
    }

    /// Writes every byte, retrying short writes and interrupted calls.
    public static func writeAll(_ descriptor: Int32, _ bytes: [UInt8], path: String) throws(Failure) {
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { buffer in
                Glibc.write(descriptor, buffer.baseAddress! + written, buffer.count - written)
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw failure("cannot write \(path)")
            }
            written += result
        }
    }

    /// Makes creations, renames and deletions in a directory durable.
    public static func syncDirectory(_ path: String) throws(Failure) {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure("cannot open directory \(path)") }
        defer { Glibc.close(descriptor) }
        guard fsync(descriptor) == 0 else { throw failure("cannot fsync directory \(path)") }
    }

    /// The identity and the last modification of the file open on `descriptor`.
    public static func identity(of descriptor: Int32) -> (identity: Identity, modified: timespec)? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        return (Identity(device: UInt64(status.st_dev), inode: UInt64(status.st_ino)), status.st_mtim)
    }

    /// The identity of the file `path` names now; nil when nothing does.
    public static func identity(at path: String) -> Identity? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return nil }
        return Identity(device: UInt64(status.st_dev), inode: UInt64(status.st_ino))
    }

    /// A failure carrying the current errno's text, read before anything can change it.
    private static func failure(_ what: String) -> Failure {
        let number = errno
        return Failure(message: "\(what): \(String(cString: strerror(number))) (errno \(number))", errorNumber: number)
    }
}
