import Foundation
import SIWASupport
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
    /// One rewrite at a time: two deletions at once must not share a temporary file.
    private let rewriting = Mutex(0)
    /// Wall time: the record's `spooledAt` and the time in its file name.
    private let clock: EndpointClock

    public init(spoolDirectory: String, clock: EndpointClock = .system) throws(SpoolError) {
        directory = spoolDirectory + "/" + Self.directoryName
        self.clock = clock
        try SpoolFileSystem.prepareDirectory(directory, mode: SpoolFileSystem.privateDirectoryMode)
    }

    /// Writes the record durably; returns the file it is kept in. `reason`, the refusal's
    /// code, ends the file name (`spool list` shows it): letters, digits and `_` only.
    @discardableResult
    public func add(_ notification: VerifiedNotification, reason: String? = nil) throws(SpoolError) -> String {
        let now = clock.wallMilliseconds()
        let number = counter.add(1, ordering: .relaxed).newValue
        let code = String((reason ?? "").filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }.prefix(64))
        let name =
            "record-\(NotificationSpool.paddedSequence(UInt64(max(0, now))))-\(getpid())-\(number)"
            + (code.isEmpty ? "" : "-" + code) + ".log"
        let path = directory + "/" + name
        try SpoolFileSystem.createDurably(
            path, SpoolRecord.encode(notification, spooledAt: now), mode: SpoolFileSystem.privateFileMode,
            directory: directory, code: .setAsideFailed)
        return path
    }

    /// Removes the email address from every set-aside record of this user (after their
    /// `account-deleted`: no address of theirs may stay anywhere the endpoint writes).
    /// Each file that held one is rewritten whole and renamed over itself. The record
    /// stays: requeued, an email event of a deleted account is `stale` anyway.
    /// Returns how many records lost an address.
    @discardableResult
    public func forgetEmail(clientID: String, subject: String) throws(SpoolError) -> Int {
        try rewriting.withLock { (_: inout Int) throws(SpoolError) -> Int in
            try rewriteWithoutEmail(clientID: clientID, subject: subject)
        }
    }

    private func rewriteWithoutEmail(clientID: String, subject: String) throws(SpoolError) -> Int {
        var scrubbed = 0
        for name in try Self.recordFiles(directory) {
            let path = directory + "/" + name
            guard let reader = try SpoolSegmentReader(path: path, offset: 0) else { continue }
            var lines: [[UInt8]] = []
            var changed = 0
            var intact = true
            while let entry = try reader.next() {
                guard case .record(let record, let spooledAt, let attemptedAt, _) = entry else {
                    intact = false
                    break
                }
                if record.clientID == clientID, record.subject == subject, record.email != nil {
                    let withoutAddress = VerifiedNotification(
                        clientID: record.clientID, subject: record.subject, type: record.type,
                        rawType: record.rawType, eventTimeMilliseconds: record.eventTimeMilliseconds,
                        tokenID: record.tokenID, issuedAt: record.issuedAt, expiresAt: record.expiresAt, email: nil,
                        isPrivateEmail: nil)
                    lines.append(SpoolRecord.encode(withoutAddress, spooledAt: spooledAt, attemptedAt: attemptedAt))
                    changed += 1
                } else {
                    lines.append(SpoolRecord.encode(record, spooledAt: spooledAt, attemptedAt: attemptedAt))
                }
            }
            // A file with damage in it is left as it is (retention deletes it).
            guard intact, changed > 0 else { continue }
            try SpoolFileSystem.createDurably(
                path, lines.flatMap { $0 }, mode: SpoolFileSystem.privateFileMode, directory: directory,
                code: .setAsideFailed)
            scrubbed += changed
        }
        return scrubbed
    }

    /// The record files here, oldest name first (files of earlier releases, which kept a
    /// spool here, too: every `.log` file holds only set-aside records).
    static func recordFiles(_ directory: String) throws(SpoolError) -> [String] {
        guard SpoolFileSystem.status(directory) != nil else { return [] }
        return try SpoolFileSystem.list(directory).filter { $0.hasSuffix(NotificationSpool.segmentSuffix) }.sorted()
    }
}
