import SIWAJSON
import SIWASupport

#if canImport(Glibc)
    import Glibc
#endif

/// Why the spool could not keep or read a notification: a stable code and a plain
/// message naming the file and the system error, never a record's contents.
public struct SpoolError: CodedError {
    public let code: Code
    public let message: String
    /// The system call's errno, when one failed (`ENOSPC`, `EACCES`...): its name goes to the
    /// log line, so an alert can tell a full disk from a permission.
    public let errorNumber: Int32?

    public init(_ code: Code, _ message: String, errorNumber: Int32? = nil) {
        self.code = code
        self.message = message
        self.errorNumber = errorNumber
    }

    /// The errno's symbolic name (`ENOSPC`), `errno <n>` for one not named here, nil without one.
    public var errnoName: String? {
        guard let errorNumber else { return nil }
        return Self.errnoNames[errorNumber] ?? "errno \(errorNumber)"
    }

    /// The errors file system calls give; others are logged by number.
    private static let errnoNames: [Int32: String] = [
        EPERM: "EPERM", ENOENT: "ENOENT", EINTR: "EINTR", EIO: "EIO", EBADF: "EBADF", EAGAIN: "EAGAIN",
        ENOMEM: "ENOMEM", EACCES: "EACCES", EBUSY: "EBUSY", EEXIST: "EEXIST", EXDEV: "EXDEV",
        ENOTDIR: "ENOTDIR", EISDIR: "EISDIR", EINVAL: "EINVAL", ENFILE: "ENFILE", EMFILE: "EMFILE",
        EFBIG: "EFBIG", ENOSPC: "ENOSPC", EROFS: "EROFS", EMLINK: "EMLINK", ENAMETOOLONG: "ENAMETOOLONG",
        ELOOP: "ELOOP", ENOTEMPTY: "ENOTEMPTY", EDQUOT: "EDQUOT", ESTALE: "ESTALE",
    ]

    /// The log line's fields for this error: its code, and the errno's name when there is one.
    public var logFields: [(String, JSONValue)] {
        [("error", .string(code.rawValue))] + (errnoName.map { [("errno", .string($0))] } ?? [])
    }

    /// A stable, machine-readable error code. New codes break no caller.
    public struct Code: ErrorCode {
        public let rawValue: String

        init(_ rawValue: String) { self.rawValue = rawValue }

        /// The spool directory cannot be created, opened, listed or given mode 0700.
        public static let directoryUnusable = Code("spool_directory_unusable")
        /// A segment file cannot be created or opened (read-only directory, no space, permissions).
        public static let openFailed = Code("spool_open_failed")
        /// Writing a record failed; the record is not in the spool.
        public static let writeFailed = Code("spool_write_failed")
        /// fsync failed; the record is not known to be durable and must not be acknowledged.
        public static let syncFailed = Code("spool_sync_failed")
        /// A segment cannot be read back for replay.
        public static let readFailed = Code("spool_read_failed")
        /// The replay position cannot be saved; applied records may be applied again.
        public static let commitFailed = Code("spool_commit_failed")
        /// A torn or corrupt record cannot be moved to its `.torn` file.
        public static let setAsideFailed = Code("spool_set_aside_failed")
        /// A fully replayed segment cannot be deleted.
        public static let removeFailed = Code("spool_remove_failed")
        /// The replay position file exists but cannot be read or does not check out: the
        /// spool refuses to start rather than guess where replay stopped.
        public static let positionUnreadable = Code("spool_position_unreadable")
        /// A set-aside or requeued file cannot be moved where it belongs.
        public static let moveFailed = Code("spool_move_failed")
        /// Another process (`spool requeue`, a retention sweep, a scrub) held `rejected/`
        /// longer than the wait allows; nothing was changed.
        public static let setAsideBusy = Code("spool_set_aside_busy")
        /// A name under the spool is a link, a FIFO or a device where a file belongs:
        /// it is never opened (a link could name a private key, a FIFO would block).
        public static let notRegularFile = Code("spool_file_not_regular")
    }
}
