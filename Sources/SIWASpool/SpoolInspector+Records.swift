import Foundation
import SIWAVerification

/// One set-aside or torn record at a time, for `spool list`, `show`, `requeue ID` and
/// `discard ID`, with or without a running `serve`. An ID is only ever looked up among
/// the files listed (never turned into a path), and each change is one atomic rename or
/// deletion of one file: a record is requeued or discarded once, never both.
extension SpoolInspector {
    public struct Record: Sendable, Equatable {
        public enum Kind: String, Sendable {
            /// In `rejected/`: Redis refused it for a reason about the record.
            case setAside = "set_aside"
            /// A `.torn` file: bytes that are not a whole, intact record.
            case torn
        }

        /// `record-...` (a file in `rejected/`) or `torn-<segment number>`.
        public let id: String
        public let kind: Kind
        /// The refusal's code for a set-aside record (`not_recorded` for one set aside by an
        /// earlier release), `damaged_bytes` for a torn one.
        public let why: String
        /// The notifications in the file: one for a set-aside record (an earlier release
        /// could keep several in one file: they move together); none for torn bytes.
        public let notifications: [VerifiedNotification]
        /// Google's Security Event Tokens in the file (one for a set-aside token; none for
        /// Apple's or torn bytes).
        public var securityEvents: [VerifiedSecurityEvent] = []
        /// When it was set aside (ms): the time in its name, else the file's modification time.
        public let setAsideAt: Int64
        public let path: String
        public let bytes: Int

        /// Whose record it is: `apple`, `google`, or nil for torn bytes (and an empty file).
        public var provider: String? {
            if !notifications.isEmpty { return "apple" }
            return securityEvents.isEmpty ? nil : "google"
        }

        /// How many records the file holds, Apple's and Google's.
        public var recordCount: Int { notifications.count + securityEvents.count }

        /// The first record's event type and client ID (`spool list`), whoever's it is.
        public var firstTypeAndClient: (type: String, clientID: String)? {
            if let first = notifications.first { return (first.type.name, first.clientID) }
            if let first = securityEvents.first {
                return (first.events.first?.type.name ?? "", first.clientIDs.first ?? "")
            }
            return nil
        }
    }

    /// Every set-aside file, oldest first, then every torn file.
    public static func records(spoolDirectory directory: String) throws(SpoolError) -> [Record] {
        guard SpoolFileSystem.status(directory) != nil else {
            throw SpoolError(.directoryUnusable, "\(directory) does not exist")
        }
        var result: [Record] = []
        let rejected = directory + "/" + SpoolSetAsideStore.directoryName
        for name in try SpoolSetAsideStore.recordFiles(rejected) {
            let path = rejected + "/" + name
            guard let status = SpoolFileSystem.regularFileStatus(path) else { continue }  // requeued meanwhile
            var notifications: [VerifiedNotification] = []
            var securityEvents: [VerifiedSecurityEvent] = []
            if let reader = try SpoolSegmentReader(path: path, offset: 0) {
                while let entry = try reader.next() {
                    switch entry {
                    case .record(let notification, _, _, _): notifications.append(notification)
                    case .securityEvent(let securityEvent, _, _, _): securityEvents.append(securityEvent)
                    case .bad: break
                    }
                }
            }
            let stem = String(name.dropLast(NotificationSpool.segmentSuffix.count))
            let parts = stem.split(separator: "-")
            let why = parts.count >= 5 ? String(parts[4]) : "not_recorded"
            let named = parts.count >= 2 ? Int64(parts[1]) : nil
            var record = Record(
                id: stem, kind: .setAside, why: why, notifications: notifications,
                setAsideAt: named ?? status.modified * 1000, path: path, bytes: status.size)
            record.securityEvents = securityEvents
            result.append(record)
        }
        for name in try SpoolFileSystem.list(directory).sorted() where name.hasSuffix(NotificationSpool.tornSuffix) {
            let path = directory + "/" + name
            // lstat: a link or a FIFO named like torn bytes is listed by no one, shown by no one.
            guard let status = SpoolFileSystem.regularFileStatus(path) else { continue }
            let stem = name.dropLast(NotificationSpool.tornSuffix.count)
            let number =
                stem.hasPrefix(NotificationSpool.segmentPrefix)
                ? String(stem.dropFirst(NotificationSpool.segmentPrefix.count)) : String(stem)
            result.append(
                Record(
                    id: "torn-" + number, kind: .torn, why: "damaged_bytes", notifications: [],
                    setAsideAt: status.modified * 1000, path: path, bytes: status.size))
        }
        return result
    }

    /// The record listed under `id`, or nil.
    public static func record(spoolDirectory directory: String, id: String) throws(SpoolError) -> Record? {
        try records(spoolDirectory: directory).first { $0.id == id }
    }

    public enum OneRecordOutcome: Sendable, Equatable {
        case done(Record)
        /// No such ID (never was, or already requeued or discarded).
        case notFound
        /// Torn bytes are not a record: they cannot be put back in line.
        case notARecord
    }

    /// Puts one set-aside record back in line (behind what waits now), by one rename, as
    /// `requeue(spoolDirectory:)` does for all.
    public static func requeue(spoolDirectory directory: String, id: String) throws(SpoolError) -> OneRecordOutcome {
        try requeue(spoolDirectory: directory, id: id, lockWait: SpoolSetAsideStore.lockWait)
    }

    static func requeue(spoolDirectory directory: String, id: String, lockWait: Duration) throws(SpoolError)
        -> OneRecordOutcome
    {
        guard let record = try record(spoolDirectory: directory, id: id) else { return .notFound }
        guard record.kind == .setAside else { return .notARecord }
        let name = (record.path as NSString).lastPathComponent
        let rejected = directory + "/" + SpoolSetAsideStore.directoryName
        // Under the lock on rejected/ that serve's scrub and retention sweep take: never
        // moved while one of them rewrites or deletes it.
        let moved = try SpoolFileSystem.withDirectoryLock(rejected, wait: lockWait) { () throws(SpoolError) in
            try SpoolFileSystem.move(record.path, to: directory + "/" + NotificationSpool.requeuePrefix + name)
        }
        guard moved else { return .notFound }
        try SpoolFileSystem.syncDirectory(directory)
        try SpoolFileSystem.syncDirectory(directory + "/" + SpoolSetAsideStore.directoryName)
        return .done(record)
    }

    /// Deletes one set-aside or torn record for good. The caller logs it.
    public static func discard(spoolDirectory directory: String, id: String) throws(SpoolError) -> OneRecordOutcome {
        try discard(spoolDirectory: directory, id: id, lockWait: SpoolSetAsideStore.lockWait)
    }

    static func discard(spoolDirectory directory: String, id: String, lockWait: Duration) throws(SpoolError)
        -> OneRecordOutcome
    {
        guard let record = try record(spoolDirectory: directory, id: id) else { return .notFound }
        let parent = (record.path as NSString).deletingLastPathComponent
        // unlink is atomic: if a requeue renamed the file first, this finds nothing. A
        // set-aside record is deleted under the lock on rejected/ (see requeue).
        let delete = { () throws(SpoolError) -> Bool in
            guard unlink(record.path) == 0 else {
                if errno == ENOENT { return false }
                throw SpoolError(.removeFailed, "cannot delete \(record.path)")
            }
            return true
        }
        let deleted =
            record.kind == .setAside
            ? try SpoolFileSystem.withDirectoryLock(parent, wait: lockWait, delete) : try delete()
        guard deleted else { return .notFound }
        try SpoolFileSystem.syncDirectory(parent)
        return .done(record)
    }

    /// The spool's audit file: one JSON line per `spool discard` (what was lost, why, who),
    /// kept with the spool it concerns; never an address or a sub.
    static let auditFileName = "audit.jsonl"

    /// Whether the audit file can be appended to (created if absent): asked before a
    /// discard, so none happens that could not be recorded.
    public static func checkAuditable(spoolDirectory directory: String) throws(SpoolError) {
        let path = directory + "/" + auditFileName
        guard SpoolFileSystem.exists(path) else { return }  // created, never through a link, by the append
        SpoolFileSystem.close(try SpoolFileSystem.openForAppending(name: auditFileName, in: directory))
    }

    /// Appends one line (a JSON object and its newline) to the spool's audit file, durably.
    public static func audit(spoolDirectory directory: String, line: [UInt8]) throws(SpoolError) {
        try SpoolFileSystem.appendLineDurably(line, name: auditFileName, in: directory)
    }

    /// The first bytes of a torn file as text, every email-like word masked unless asked.
    public static func tornText(_ record: Record, showAddress: Bool, limit: Int = 65_536) throws(SpoolError) -> String {
        guard let descriptor = try SpoolFileSystem.openForReading(record.path, code: .readFailed) else { return "" }
        defer { SpoolFileSystem.close(descriptor) }
        let bytes = try SpoolFileSystem.readAt(
            descriptor, offset: 0, count: min(limit, record.bytes), code: .readFailed, path: record.path)
        let text = String(decoding: bytes, as: UTF8.self)
        guard !showAddress else { return text }
        return text.replacingOccurrences(
            of: #"[^\s"@{}:,]+@[^\s"{}:,]+"#, with: "(address masked)", options: .regularExpression)
    }
}
