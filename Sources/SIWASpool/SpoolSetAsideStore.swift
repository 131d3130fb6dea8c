import Foundation
import SIWASupport
import SIWAVerification
import Synchronization

/// `rejected/` inside the spool directory: records Redis refused for a reason that is
/// about the record itself (a user key of the wrong type, an `aud` this deployment no
/// longer serves): rejected records, kept here so they cannot hold back the records after
/// them.
///
/// One file per record, `record-<ms>-<pid>-<n>.log`, written whole under a temporary
/// name and renamed into place, never appended to later. That is what lets
/// `spool requeue` (another process) move files out while `serve` adds new ones: every
/// change is one atomic rename.
public final class SpoolSetAsideStore: Sendable {
    static let directoryName = "rejected"
    /// How long a change here waits for another process's (`spool requeue`) hold on the
    /// directory before giving up; each holds it for one file at a time.
    static let lockWait: Duration = .seconds(5)
    public let directory: String
    private let counter = Atomic<Int>(0)
    /// False only after a look found no record here and this store has set none aside since:
    /// the request path then lets the next pass (within a second) scrub a deleted user's
    /// records instead of waking the replayer for each `account-deleted`.
    private let recordsMayBeHere = Atomic<Bool>(true)
    /// Records set aside by this store so far: a look that began before one of them never
    /// says "empty" (`holdsRecords`).
    private let added = Atomic<Int>(0)
    /// One rewrite at a time: two deletions at once must not share a temporary file.
    private let rewriting = Mutex(0)
    /// Wall time: the record's `spooledAt` and the time in its file name.
    private let clock: EndpointClock
    /// Runs between reading a file and replacing it: where tests put a concurrent change.
    private let afterReading: @Sendable (String) -> Void
    /// What start-up found left by a crash in `rejected/`, for the log.
    public let leftovers: [SpoolLeftover]

    public convenience init(spoolDirectory: String, clock: EndpointClock = .system) throws(SpoolError) {
        try self.init(spoolDirectory: spoolDirectory, clock: clock, afterReading: { _ in })
    }

    init(spoolDirectory: String, clock: EndpointClock, afterReading: @escaping @Sendable (String) -> Void)
        throws(SpoolError)
    {
        directory = spoolDirectory + "/" + Self.directoryName
        self.clock = clock
        self.afterReading = afterReading
        try SpoolFileSystem.prepareDirectory(directory, mode: SpoolFileSystem.privateDirectoryMode)
        leftovers = try Self.settleLeftovers(directory)
    }

    /// Writes the record durably; returns the file it is kept in. `reason`, the refusal's
    /// code, ends the file name (`spool list` shows it): letters, digits and `_` only.
    @discardableResult
    public func add(_ notification: VerifiedNotification, reason: String? = nil) throws(SpoolError) -> String {
        let now = clock.wallMilliseconds()
        return try add(SpoolRecord.encode(notification, spooledAt: now), at: now, reason: reason)
    }

    /// Keeps Google's Security Event Token as `add` keeps Apple's notification (`spool list`
    /// shows its provider; `spool requeue` puts it back in line).
    @discardableResult
    public func add(_ securityEvent: VerifiedSecurityEvent, reason: String? = nil) throws(SpoolError) -> String {
        let now = clock.wallMilliseconds()
        return try add(SpoolRecord.encode(securityEvent, spooledAt: now), at: now, reason: reason)
    }

    private func add(_ line: [UInt8], at now: Int64, reason: String?) throws(SpoolError) -> String {
        added.add(1, ordering: .sequentiallyConsistent)
        recordsMayBeHere.store(true, ordering: .sequentiallyConsistent)
        let number = counter.add(1, ordering: .relaxed).newValue
        let code = String((reason ?? "").filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }.prefix(64))
        let name =
            "record-\(NotificationSpool.paddedSequence(UInt64(max(0, now))))-\(getpid())-\(number)"
            + (code.isEmpty ? "" : "-" + code) + ".log"
        let path = directory + "/" + name
        try SpoolFileSystem.createDurably(
            path, line, mode: SpoolFileSystem.privateFileMode,
            directory: directory, code: .setAsideFailed)
        return path
    }

    /// Removes the email address from every set-aside record of this user (after their
    /// `account-deleted`: no address of theirs may stay anywhere the endpoint writes).
    /// Each file that held one is rewritten whole and renamed over itself. The record
    /// stays: requeued, an email event of a deleted account is `stale` anyway.
    /// Returns how many records lost an address.
    @discardableResult
    func forgetEmail(clientID: String, subject: String) throws(SpoolError) -> Int {
        try rewriting.withLock { (_: inout Int) throws(SpoolError) -> Int in
            try rewriteWithoutEmail(clientID: clientID, subject: subject)
        }
    }

    /// The users (client ID, sub) whose set-aside records still hold an email address, each
    /// once, oldest file first. Read without the directory lock: nothing is changed here.
    func usersWithEmail() throws(SpoolError) -> [(clientID: String, subject: String)] {
        var seen = Set<String>()
        var users: [(clientID: String, subject: String)] = []
        for name in try Self.recordFiles(directory) {
            // A file moved away meanwhile (`spool requeue`) is simply not there.
            guard let reader = try? SpoolSegmentReader(path: directory + "/" + name, offset: 0) else { continue }
            while let entry = try reader.next() {
                guard case .record(let record, _, _, _) = entry else { break }
                guard record.email != nil, seen.insert(record.clientID + "\u{0}" + record.subject).inserted
                else { continue }
                users.append((record.clientID, record.subject))
            }
        }
        return users
    }

    /// Whether a record file is set aside here (one listing). True when the directory cannot
    /// be listed: the scrub that follows fails the same way, and says so.
    var holdsRecords: Bool {
        let addedBefore = added.load(ordering: .sequentiallyConsistent)
        let holds = (try? Self.recordFiles(directory)).map { !$0.isEmpty } ?? true
        // "Empty" only if nothing was set aside while the directory was being listed.
        if holds || added.load(ordering: .sequentiallyConsistent) != addedBefore {
            recordsMayBeHere.store(true, ordering: .sequentiallyConsistent)
            return true
        }
        recordsMayBeHere.store(false, ordering: .sequentiallyConsistent)
        return false
    }

    /// Whether a record may be set aside here, as far as this store knows (its last look, and
    /// what it set aside since): another process's are seen at the next look.
    var mayHoldRecords: Bool { recordsMayBeHere.load(ordering: .sequentiallyConsistent) }

    private func rewriteWithoutEmail(clientID: String, subject: String) throws(SpoolError) -> Int {
        var scrubbed = 0
        var busy: SpoolError?
        for name in try Self.recordFiles(directory) {
            let path = directory + "/" + name
            // Held while the file is read and replaced: `spool requeue` and the retention
            // sweep take the same lock, so neither moves nor deletes a file being rewritten.
            do {
                scrubbed += try SpoolFileSystem.withDirectoryLock(directory, wait: Self.lockWait) {
                    () throws(SpoolError) -> Int in
                    try rewriteWithoutEmail(path, clientID: clientID, subject: subject)
                }
            } catch  where error.code == .setAsideBusy {
                // The other files are still scrubbed; the failure is reported after them.
                busy = error
            }
        }
        if let busy { throw busy }
        return scrubbed
    }

    /// Rewrites one file without the user's address; how many records lost one.
    private func rewriteWithoutEmail(_ path: String, clientID: String, subject: String) throws(SpoolError) -> Int {
        guard let reader = try SpoolSegmentReader(path: path, offset: 0), let opened = reader.opened else { return 0 }
        var lines: [[UInt8]] = []
        var changed = 0
        while let entry = try reader.next() {
            // A file with damage in it is left as it is (retention deletes it).
            guard case .record(let record, let spooledAt, let attemptedAt, _) = entry else { return 0 }
            if record.clientID == clientID, record.subject == subject, record.email != nil {
                lines.append(
                    SpoolRecord.encode(Self.withoutAddress(record), spooledAt: spooledAt, attemptedAt: attemptedAt))
                changed += 1
            } else {
                lines.append(SpoolRecord.encode(record, spooledAt: spooledAt, attemptedAt: attemptedAt))
            }
        }
        guard changed > 0 else { return 0 }
        afterReading(path)
        // Only the file that was read: one moved away or deleted meanwhile (by a process
        // that does not take the lock) is not brought back.
        let replaced = try SpoolFileSystem.replaceIfUnchanged(
            path, read: opened.identity, modified: opened.modified, with: lines.flatMap { $0 },
            mode: SpoolFileSystem.privateFileMode, directory: directory, code: .setAsideFailed)
        return replaced ? changed : 0
    }

    static func withoutAddress(_ record: VerifiedNotification) -> VerifiedNotification {
        VerifiedNotification(
            clientID: record.clientID, subject: record.subject, type: record.type, rawType: record.rawType,
            eventTimeMilliseconds: record.eventTimeMilliseconds, tokenID: record.tokenID, issuedAt: record.issuedAt,
            expiresAt: record.expiresAt, email: nil, isPrivateEmail: nil)
    }

    /// What a crash can leave in `rejected/`: `<name>.log.tmp`, a file written whole
    /// before its rename. Without `<name>.log` beside it, it is a record whose setting
    /// aside never finished: the spool did not move past that record, which replay sets
    /// aside again, so the copy is deleted. With `<name>.log` beside it, it is that file
    /// rewritten without an address: adopted (renamed over it) when it holds the same
    /// records, whole, differing at most by the address removed; deleted otherwise.
    /// Either way no `.tmp` file stays to escape the retention and the scrub.
    /// What `settleLeftovers` would refuse, found without changing anything (`serve
    /// --check`): a leftover that is not a regular file can be neither adopted nor deleted.
    static func checkLeftovers(spoolDirectory: String) throws(SpoolError) {
        let directory = spoolDirectory + "/" + directoryName
        guard SpoolFileSystem.status(directory) != nil else { return }
        let suffix = NotificationSpool.segmentSuffix + SpoolFileSystem.temporarySuffix
        for name in try SpoolFileSystem.list(directory).filter({ $0.hasSuffix(suffix) }).sorted() {
            let path = directory + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG else { continue }
            throw SpoolError(.removeFailed, "cannot delete \(path): a leftover that is not a regular file")
        }
    }

    static func settleLeftovers(_ directory: String) throws(SpoolError) -> [SpoolLeftover] {
        let suffix = NotificationSpool.segmentSuffix + SpoolFileSystem.temporarySuffix
        var settled: [SpoolLeftover] = []
        for name in try SpoolFileSystem.list(directory).filter({ $0.hasSuffix(suffix) }).sorted() {
            let temporary = directory + "/" + name
            let original = String(temporary.dropLast(SpoolFileSystem.temporarySuffix.count))
            if SpoolFileSystem.identity(at: original) != nil,
                try isAddressRemoved(from: original, in: temporary),
                try SpoolFileSystem.move(temporary, to: original)
            {
                settled.append(SpoolLeftover(file: temporary, action: .adopted))
            } else {
                try SpoolFileSystem.remove(temporary)
                settled.append(SpoolLeftover(file: temporary, action: .deleted))
            }
        }
        if !settled.isEmpty { try SpoolFileSystem.syncDirectory(directory) }
        return settled
    }

    /// Whether `rewritten` holds exactly the records of `original`, each whole, at most
    /// without its address.
    private static func isAddressRemoved(from original: String, in rewritten: String) throws(SpoolError) -> Bool {
        guard let before = try SpoolSegmentReader(path: original, offset: 0),
            let after = try SpoolSegmentReader(path: rewritten, offset: 0)
        else { return false }
        while true {
            switch (try before.next(), try after.next()) {
            case (nil, nil): return true
            case (
                .record(let old, let oldSpooledAt, let oldAttemptedAt, _),
                .record(let new, let newSpooledAt, let newAttemptedAt, _)
            ):
                guard oldSpooledAt == newSpooledAt, oldAttemptedAt == newAttemptedAt,
                    new == old || new == withoutAddress(old)
                else { return false }
            default: return false
            }
        }
    }

    /// The record files here, oldest name first (files of earlier releases, which kept a
    /// spool here, too: every `.log` file holds only set-aside records).
    static func recordFiles(_ directory: String) throws(SpoolError) -> [String] {
        guard SpoolFileSystem.status(directory) != nil else { return [] }
        // lstat: a link or a FIFO under a record's name is no record (never followed, never opened).
        return try SpoolFileSystem.list(directory).filter {
            $0.hasSuffix(NotificationSpool.segmentSuffix)
                && SpoolFileSystem.regularFileStatus(directory + "/" + $0) != nil
        }.sorted()
    }
}

/// A file a crash left in `rejected/`, and what start-up did with it.
public struct SpoolLeftover: Sendable, Equatable {
    public enum Action: String, Sendable {
        /// Renamed over the file it was rewritten from (it is that file without an address).
        case adopted
        /// Deleted (a copy of a record the spool still holds, or an unfinished rewrite).
        case deleted
    }

    public let file: String
    public let action: Action
}
