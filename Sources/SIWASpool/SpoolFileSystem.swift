import SIWASupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The thin wrapper over the POSIX calls the spool needs. Every pointer and errno the
/// spool touches lives here; the spool's logic above it is plain Swift.
package enum SpoolFileSystem {
    /// Spool files may hold email addresses: owner only.
    static let privateFileMode: mode_t = 0o600
    package static let privateDirectoryMode: mode_t = 0o700
    /// Numbers the write checks of this process, so no two share a file.
    private static let writeCheckNumber = Atomic<Int>(0)

    /// Creates `path` if absent and gives it exactly `mode`; refuses a non-directory.
    static func prepareDirectory(_ path: String, mode: mode_t) throws(SpoolError) {
        if mkdir(path, mode) == 0 {
            // The new entry must survive a crash like the records inside it.
            try? syncDirectory(parent(of: path))
        } else if errno != EEXIST {
            throw failure(.directoryUnusable, "cannot create directory \(path)")
        }
        var status = stat()
        guard stat(path, &status) == 0 else { throw failure(.directoryUnusable, "cannot stat \(path)") }
        guard status.st_mode & S_IFMT == S_IFDIR else {
            throw SpoolError(.directoryUnusable, "\(path) is not a directory")
        }
        // mkdir applies the umask, and an existing directory may grant others access: take
        // away what `mode` does not grant, but add nothing (an operator may have made it read-only).
        let current = status.st_mode & 0o7777
        if current & ~mode != 0, chmod(path, current & mode) != 0 {
            throw failure(.directoryUnusable, "cannot narrow the mode of \(path) to \(String(mode, radix: 8))")
        }
    }

    /// Names of the entries in a directory, without `.` and `..`.
    static func list(_ path: String) throws(SpoolError) -> [String] {
        guard let stream = opendir(path) else { throw failure(.directoryUnusable, "cannot list \(path)") }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafePointer(to: entry.pointee.d_name) { tuple in
                tuple.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: tuple.pointee)) {
                    String(cString: $0)
                }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Creates a new file for appending with exactly `mode`; fails if it exists.
    static func createForAppend(_ path: String, mode: mode_t) throws(SpoolError) -> Int32 {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw failure(.openFailed, "cannot create \(path)") }
        // open applies the umask; the mode is the promise (records may hold email addresses).
        if fchmod(descriptor, mode) != 0 {
            let error = failure(.openFailed, "cannot set mode \(String(mode, radix: 8)) on \(path)")
            Glibc.close(descriptor)
            unlink(path)
            throw error
        }
        return descriptor
    }

    /// Writes every byte, retrying short writes and interrupted calls.
    static func writeAll(_ descriptor: Int32, _ bytes: [UInt8], code: SpoolError.Code, path: String)
        throws(SpoolError)
    {
        do throws(DurableFile.Failure) {
            try DurableFile.writeAll(descriptor, bytes, path: path)
        } catch {
            throw SpoolError(code, error.message, errorNumber: error.errorNumber)
        }
    }

    static func sync(_ descriptor: Int32, path: String) throws(SpoolError) {
        guard fsync(descriptor) == 0 else { throw failure(.syncFailed, "cannot fsync \(path)") }
    }

    /// Makes creations, renames and deletions in a directory durable.
    static func syncDirectory(_ path: String) throws(SpoolError) {
        do throws(DurableFile.Failure) {
            try DurableFile.syncDirectory(path)
        } catch {
            throw SpoolError(.syncFailed, error.message, errorNumber: error.errorNumber)
        }
    }

    /// Cuts a file back to `size`; used to take back a partly written record.
    static func truncate(_ descriptor: Int32, to size: Int) -> Bool { ftruncate(descriptor, off_t(size)) == 0 }

    static func close(_ descriptor: Int32) { _ = Glibc.close(descriptor) }

    /// The whole file, or nil when it does not exist.
    static func read(_ path: String, code: SpoolError.Code) throws(SpoolError) -> [UInt8]? {
        guard let descriptor = try openForReading(path, code: code) else { return nil }
        defer { Glibc.close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress!, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw failure(code, "cannot read \(path)")
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[0..<count])
        }
    }

    /// Opens an existing file for reading; nil when it does not exist.
    static func openForReading(_ path: String, code: SpoolError.Code) throws(SpoolError) -> Int32? {
        let descriptor = open(path, O_RDONLY | noFollow)
        guard descriptor >= 0 else {
            if errno == ENOENT { return nil }
            if errno == ELOOP { throw notRegular(path) }
            throw failure(code, "cannot open \(path)")
        }
        return try regularOnly(descriptor, path)
    }

    /// Opens an existing file for reading and writing in place.
    static func openForUpdate(_ path: String, code: SpoolError.Code) throws(SpoolError) -> Int32 {
        let descriptor = open(path, O_RDWR | noFollow)
        guard descriptor >= 0 else {
            if errno == ELOOP { throw notRegular(path) }
            throw failure(code, "cannot open \(path)")
        }
        return try regularOnly(descriptor, path)
    }

    /// Every file under a spool is opened without following a link (`O_NOFOLLOW`) and
    /// without waiting for a writer (`O_NONBLOCK`: a FIFO opens at once), and is used only
    /// when it is a regular file: the operator commands run as root on a directory the
    /// service user can write, where a planted link or FIFO must never be read, written
    /// or waited on.
    static let noFollow = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC

    /// The descriptor when it is a regular file; closed, and `spool_file_not_regular`, when not.
    static func regularOnly(_ descriptor: Int32, _ path: String) throws(SpoolError) -> Int32 {
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            Glibc.close(descriptor)
            throw notRegular(path)
        }
        return descriptor
    }

    private static func notRegular(_ path: String) -> SpoolError {
        SpoolError(.notRegularFile, "\(path) is not a regular file (a link, a FIFO or a device): not opened")
    }

    /// Whether anything (a link included, not followed) is at `path`.
    static func exists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }

    /// The size and modification time of a regular file at `path` (`lstat`: a link is
    /// not followed); nil when absent or anything else than a regular file.
    static func regularFileStatus(_ path: String) -> (size: Int, modified: Int64)? {
        var status = stat()
        guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { return nil }
        return (Int(status.st_size), Int64(status.st_mtim.tv_sec))
    }

    /// Reads up to `count` bytes at `offset`; fewer only at the end of the file.
    static func readAt(_ descriptor: Int32, offset: Int, count: Int, code: SpoolError.Code, path: String)
        throws(SpoolError) -> [UInt8]
    {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let result = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + done, count - done, off_t(offset + done))
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw failure(code, "cannot read \(path)")
            }
            if result == 0 { break }
            done += result
        }
        return Array(bytes[0..<done])
    }

    /// Overwrites bytes in place at `offset` and makes them durable. Within a file's
    /// existing size this needs no new space, which is what lets replay record its
    /// progress on a full disk.
    static func overwriteDurably(_ descriptor: Int32, _ bytes: [UInt8], at offset: Int, path: String)
        throws(SpoolError)
    {
        var done = 0
        while done < bytes.count {
            let result = bytes.withUnsafeBytes { buffer in
                pwrite(descriptor, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw failure(.commitFailed, "cannot write \(path)")
            }
            done += result
        }
        guard fdatasync(descriptor) == 0 else { throw failure(.commitFailed, "cannot fsync \(path)") }
    }

    /// The file's size in bytes and its last modification (Unix seconds); nil when absent.
    static func status(_ path: String) -> (size: Int, modified: Int64)? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        return (Int(status.st_size), Int64(status.st_mtim.tv_sec))
    }

    static func size(of descriptor: Int32) -> Int? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        return Int(status.st_size)
    }

    /// Renames `from` to `to`; false (and nothing changed) when `from` no longer exists.
    static func move(_ from: String, to destination: String) throws(SpoolError) -> Bool {
        if rename(from, destination) == 0 { return true }
        if errno == ENOENT { return false }
        throw failure(.moveFailed, "cannot rename \(from) to \(destination)")
    }

    /// Appends the bytes `start..<end` of the file `source` to `path`, in bounded pieces,
    /// and makes them durable: setting damaged bytes aside never holds a whole segment in memory.
    static func appendRangeDurably(
        from source: String, _ start: Int, _ end: Int, to path: String, mode: mode_t, directory: String
    ) throws(SpoolError) {
        guard let input = try openForReading(source, code: .setAsideFailed) else {
            throw SpoolError(.setAsideFailed, "\(source) disappeared while being set aside")
        }
        defer { Glibc.close(input) }
        let existed = access(path, F_OK) == 0
        let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | noFollow, mode)
        guard descriptor >= 0 else { throw failure(.setAsideFailed, "cannot open \(path)") }
        defer { Glibc.close(descriptor) }
        guard fchmod(descriptor, mode) == 0 else { throw failure(.setAsideFailed, "cannot set mode on \(path)") }
        var offset = start
        while offset < end {
            let piece = try readAt(
                input, offset: offset, count: min(64 * 1024, end - offset), code: .setAsideFailed, path: source)
            if piece.isEmpty { break }
            try writeAll(descriptor, piece, code: .setAsideFailed, path: path)
            offset += piece.count
        }
        guard fsync(descriptor) == 0 else { throw failure(.setAsideFailed, "cannot fsync \(path)") }
        if !existed {
            do { try syncDirectory(directory) } catch {
                throw SpoolError(.setAsideFailed, error.message, errorNumber: error.errorNumber)
            }
        }
    }

    /// Writes a new file whole under a temporary name, fsyncs it and renames it into place,
    /// so `path` never exists half written; the directory is fsynced too.
    static func createDurably(_ path: String, _ bytes: [UInt8], mode: mode_t, directory: String, code: SpoolError.Code)
        throws(SpoolError)
    {
        _ = try writeDurably(path, bytes, mode: mode, directory: directory, code: code)
    }

    /// The durable writer (`DurableFile.write`), its failure given `code`.
    static func writeDurably(
        _ path: String, _ bytes: [UInt8], mode: mode_t, exactMode: Bool = true, directory: String,
        code: SpoolError.Code, temporary: String? = nil, modified: timespec? = nil, replacing: FileIdentity? = nil
    ) throws(SpoolError) -> Bool {
        do throws(DurableFile.Failure) {
            return try DurableFile.write(
                path, bytes, mode: mode, exactMode: exactMode, directory: directory, temporary: temporary,
                modified: modified, replacing: replacing)
        } catch {
            throw SpoolError(code, error.message, errorNumber: error.errorNumber)
        }
    }

    /// Which file a path or a descriptor names: a rename keeps it, a re-creation changes it.
    typealias FileIdentity = DurableFile.Identity

    /// The identity and the last modification of the file open on `descriptor`.
    static func identity(of descriptor: Int32) -> (identity: FileIdentity, modified: timespec)? {
        DurableFile.identity(of: descriptor)
    }

    /// The identity of the file `path` names now; nil when nothing does.
    static func identity(at path: String) -> FileIdentity? { DurableFile.identity(at: path) }

    /// Replaces the file that was read (`read`) with `bytes`, only if `path` still names it:
    /// a file another process renamed away (`spool requeue`) or deleted (the retention
    /// sweep) after it was read is not re-created. The new file keeps the old one's
    /// modification time, which is what the retention counts from. Written under a
    /// temporary name, fsynced, renamed over; the directory is fsynced. Returns whether
    /// it replaced the file.
    static func replaceIfUnchanged(
        _ path: String, read: FileIdentity, modified: timespec, with bytes: [UInt8], mode: mode_t,
        directory: String, code: SpoolError.Code
    ) throws(SpoolError) -> Bool {
        try writeDurably(
            path, bytes, mode: mode, directory: directory, code: code, modified: modified, replacing: read)
    }

    /// The suffix of a file written whole before it is renamed into place.
    static let temporarySuffix = DurableFile.temporarySuffix

    /// Runs `body` holding an exclusive `flock` on `directory`, which every process that
    /// reads-then-changes files there takes too (`serve`'s scrub and retention sweep,
    /// `spool requeue`). Waits at most `wait` for another holder, then throws `busy`.
    static func withDirectoryLock<Result>(
        _ directory: String, wait: Duration, _ body: () throws(SpoolError) -> Result
    ) throws(SpoolError) -> Result {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure(.directoryUnusable, "cannot open directory \(directory)") }
        defer { Glibc.close(descriptor) }
        let deadline = ContinuousClock.now + wait
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR else {
                throw failure(.setAsideBusy, "cannot lock \(directory)")
            }
            guard ContinuousClock.now < deadline else {
                throw SpoolError(
                    .setAsideBusy, "another process held \(directory) for more than \(wait); nothing was changed")
            }
            usleep(5_000)
        }
        // Closing the descriptor (deferred) releases the lock.
        return try body()
    }

    /// Appends `line` to the file `name` in `directory` (created 0600 if absent) and makes it
    /// durable. Never through a link, never into a FIFO (`noFollow`, regular files only).
    /// Created by root in a directory of another owner, the file is given to that owner,
    /// so the next append by that user (serve's, or an operator's) succeeds.
    static func appendLineDurably(_ line: [UInt8], name: String, in directory: String) throws(SpoolError) {
        let path = directory + "/" + name
        let descriptor = try openForAppending(name: name, in: directory)
        defer { Glibc.close(descriptor) }
        try writeAll(descriptor, line, code: .writeFailed, path: path)
        guard fdatasync(descriptor) == 0 else { throw failure(.syncFailed, "cannot fsync \(path)") }
        try syncDirectory(directory)
    }

    /// Opens (creating, 0600) the file `name` in `directory` for appending: never through a
    /// link, never a FIFO. Created by root in a directory of another owner, it is given to
    /// that owner, so the next append by that user succeeds too.
    static func openForAppending(name: String, in directory: String) throws(SpoolError) -> Int32 {
        let path = directory + "/" + name
        let opened = open(path, O_WRONLY | O_CREAT | O_APPEND | noFollow, privateFileMode)
        guard opened >= 0 else {
            if errno == ELOOP { throw notRegular(path) }
            throw failure(.writeFailed, "cannot open \(path)")
        }
        let descriptor = try regularOnly(opened, path)
        var owner = stat()
        if geteuid() == 0, stat(directory, &owner) == 0, fchown(descriptor, owner.st_uid, owner.st_gid) != 0 {
            let error = failure(.writeFailed, "cannot give \(path) to the spool's owner")
            Glibc.close(descriptor)
            throw error
        }
        return descriptor
    }

    /// The names `canWrite` gives its files start with one of these, then `.`.
    static let writeCheckNames = [".write-check", ".ready-check"]

    /// Whether a small file can be written and fsynced in `directory` now (then deleted).
    /// Each check writes a file of its own (`<probeName>.<pid>.<n>`): checks run at once
    /// (overlapping readiness probes on several workers), and with one shared name one
    /// check's unlink made another's exclusive create fail, a false "unwritable". The
    /// unlink first removes a leftover of an earlier process that had this pid. A process
    /// killed between the create and the unlink (a liveness kill while an fsync hangs)
    /// leaves its file: `removeLeftoverWriteChecks` deletes those at the spool's start.
    static func canWrite(in directory: String, probeName: String = ".write-check") -> Bool {
        let check = writeCheckNumber.add(1, ordering: .relaxed).newValue
        let path = directory + "/" + probeName + ".\(getpid()).\(check)"
        unlink(path)
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, privateFileMode)
        guard descriptor >= 0 else { return false }
        defer {
            Glibc.close(descriptor)
            unlink(path)
        }
        let bytes = [UInt8](repeating: 0x0A, count: 4096)
        return (try? writeAll(descriptor, bytes, code: .writeFailed, path: path)) != nil && fsync(descriptor) == 0
    }

    /// Deletes the files write checks left in `directory` (their process killed before
    /// the unlink; each name of its own, so no later check reuses one): without this,
    /// every such kill left a file for good. Also the shared names of earlier releases.
    /// A check running in another process meanwhile loses only its file's name, not the
    /// file it is writing, so it still answers truly.
    static func removeLeftoverWriteChecks(in directory: String) {
        for name in (try? list(directory)) ?? []
        where writeCheckNames.contains(where: { name == $0 || name.hasPrefix($0 + ".") }) {
            unlink(directory + "/" + name)
        }
    }

    static func remove(_ path: String) throws(SpoolError) {
        guard unlink(path) == 0 || errno == ENOENT else { throw failure(.removeFailed, "cannot delete \(path)") }
    }

    private static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// An error carrying the current errno's text, read before anything can change it.
    private static func failure(_ code: SpoolError.Code, _ what: String) -> SpoolError {
        let number = errno
        return SpoolError(
            code, "\(what): \(String(cString: strerror(number))) (errno \(number))", errorNumber: number)
    }
}
