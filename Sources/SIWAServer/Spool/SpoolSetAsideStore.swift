import Foundation
import SIWAVerification
import Synchronization

/// `rejected/` inside the spool directory: records Redis refused for a reason that is
/// about the record itself (a user key of the wrong type, an `aud` this deployment no
/// longer serves), set aside so they cannot hold back the records after them.
///
/// One file per record, `record-<ms>-<pid>-<n>.log`, written whole under a temporary
/// name and renamed into place, never appended to later. That is what lets
/// `spool requeue` (another process) move files out while `serve` adds new ones: every
/// change is one atomic rename.
public final class SpoolSetAsideStore: Sendable {
    public static let directoryName = "rejected"
    public let directory: String
    private let counter = Atomic<Int>(0)
    private let clockMilliseconds: @Sendable () -> Int64

    public init(
        spoolDirectory: String,
        clockMilliseconds: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }
    ) throws(SpoolError) {
        directory = spoolDirectory + "/" + Self.directoryName
        self.clockMilliseconds = clockMilliseconds
        try SpoolFileSystem.prepareDirectory(directory, mode: SpoolFileSystem.privateDirectoryMode)
    }

    /// Writes the record durably; returns the file it is kept in.
    @discardableResult
    public func add(_ notification: VerifiedNotification) throws(SpoolError) -> String {
        let now = clockMilliseconds()
        let number = counter.add(1, ordering: .relaxed).newValue
        let name = "record-\(NotificationSpool.paddedSequence(UInt64(max(0, now))))-\(getpid())-\(number).log"
        let path = directory + "/" + name
        try SpoolFileSystem.createDurably(
            path, SpoolRecord.encode(notification, spooledAt: now), mode: SpoolFileSystem.privateFileMode,
            directory: directory, code: .setAsideFailed)
        return path
    }

    /// The record files here, oldest name first (files of earlier releases, which kept a
    /// spool here, too: every `.log` file holds only set-aside records).
    static func recordFiles(_ directory: String) throws(SpoolError) -> [String] {
        guard SpoolFileSystem.status(directory) != nil else { return [] }
        return try SpoolFileSystem.list(directory).filter { $0.hasSuffix(NotificationSpool.segmentSuffix) }.sorted()
    }
}
