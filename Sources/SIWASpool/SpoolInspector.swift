/// What `siwa-endpoint spool status`, `spool requeue` and the retention sweep do to a spool
/// directory, with or without a running `serve`: they read, or make one atomic rename or
/// deletion at a time, and never number a segment (only the spool of `serve` does).
public enum SpoolInspector {
    public struct Status: Sendable, Equatable {
        /// Records waiting to be replayed (requeued ones included).
        public var depth: Int
        /// When the first record in line was spooled (Unix ms): from the record, or for a
        /// record of an earlier release, its segment's modification time.
        public var oldestSpooledAt: Int64?
        /// Records set aside in `rejected/` (Redis refused them for a reason about the record).
        public var setAside: Int
        /// Files of torn or corrupt bytes, and their total size.
        public var tornFiles: Int
        public var tornBytes: Int
    }

    public static func status(spoolDirectory directory: String) throws(SpoolError) -> Status {
        guard SpoolFileSystem.status(directory) != nil else {
            throw SpoolError(.directoryUnusable, "\(directory) does not exist")
        }
        let position =
            try SpoolPositionFile.read(directory + "/" + NotificationSpool.positionFileName)?.position
            ?? SpoolPosition(sequence: 0, offset: 0)
        let segments = try NotificationSpool.countWaiting(directory, from: position)
        var depth = segments.count
        var oldest = segments.firstSpooledAt ?? segments.firstSegment.flatMap(modifiedMilliseconds)
        for name in try NotificationSpool.requeuedNames(directory) {
            let path = directory + "/" + name
            let counted = try SpoolSegmentReader.countRecords(path: path, from: 0)
            if depth == 0 && counted.count > 0 { oldest = counted.firstSpooledAt ?? modifiedMilliseconds(path) }
            depth += counted.count
        }
        let rejected = directory + "/" + SpoolSetAsideStore.directoryName
        var setAside = 0
        for name in try SpoolSetAsideStore.recordFiles(rejected) {
            setAside += try SpoolSegmentReader.countRecords(path: rejected + "/" + name, from: 0).count
        }
        let torn = try SpoolFileSystem.list(directory).filter {
            $0.hasSuffix(NotificationSpool.tornSuffix) && SpoolFileSystem.regularFileStatus(directory + "/" + $0) != nil
        }
        let tornBytes = torn.reduce(0) { $0 + (SpoolFileSystem.regularFileStatus(directory + "/" + $1)?.size ?? 0) }
        return Status(
            depth: depth, oldestSpooledAt: oldest, setAside: setAside, tornFiles: torn.count, tornBytes: tornBytes)
    }

    public struct Requeued: Sendable, Equatable {
        public var files: Int
        public var records: Int
    }

    /// Moves every set-aside record back in line, behind the records waiting now. Each file
    /// is renamed, whole, into the spool directory as `requeue-<name>`; the spool of a
    /// running `serve` takes it at its next replay (within a second), a stopped one at its
    /// next start. A file is in one place or the other, never both, so no record can be
    /// applied twice by this (and Redis's jti marker answers `duplicate` for one that was).
    ///
    /// Each file is counted and moved holding the lock on `rejected/` that `serve`'s scrub
    /// and retention sweep take too, so a file is never moved while it is being rewritten.
    public static func requeue(spoolDirectory directory: String) throws(SpoolError) -> Requeued {
        try requeue(spoolDirectory: directory, lockWait: SpoolSetAsideStore.lockWait)
    }

    static func requeue(spoolDirectory directory: String, lockWait: Duration) throws(SpoolError) -> Requeued {
        guard SpoolFileSystem.status(directory) != nil else {
            throw SpoolError(.directoryUnusable, "\(directory) does not exist")
        }
        let rejected = directory + "/" + SpoolSetAsideStore.directoryName
        var result = Requeued(files: 0, records: 0)
        var stoppedBy: SpoolError?
        do {
            for name in try SpoolSetAsideStore.recordFiles(rejected) {
                let source = rejected + "/" + name
                try SpoolFileSystem.withDirectoryLock(rejected, wait: lockWait) { () throws(SpoolError) in
                    let records = try SpoolSegmentReader.countRecords(path: source, from: 0).count
                    if try SpoolFileSystem.move(source, to: directory + "/" + NotificationSpool.requeuePrefix + name) {
                        result.files += 1
                        result.records += records
                    }
                }
            }
        } catch {
            stoppedBy = error
        }
        // What moved before a stop is made durable too.
        if result.files > 0 {
            try SpoolFileSystem.syncDirectory(directory)
            try SpoolFileSystem.syncDirectory(rejected)
        }
        if let stoppedBy { throw stoppedBy }
        return result
    }

    public struct Expired: Sendable, Equatable {
        /// "set_aside" or "torn".
        public var kind: String
        public var path: String
        public var ageDays: Int
    }

    /// Deletes set-aside and torn files last modified more than `days` days before `now`
    /// (Unix seconds); returns what it deleted, for the log.
    ///
    /// A set-aside file is judged and deleted holding the lock on `rejected/` (see
    /// `requeue`); one held longer than `lockWait` by another process waits for the next sweep.
    public static func expire(spoolDirectory directory: String, olderThanDays days: Int, now: Int64) -> [Expired] {
        expire(spoolDirectory: directory, olderThanDays: days, now: now, lockWait: SpoolSetAsideStore.lockWait)
    }

    static func expire(spoolDirectory directory: String, olderThanDays days: Int, now: Int64, lockWait: Duration)
        -> [Expired]
    {
        let rejected = directory + "/" + SpoolSetAsideStore.directoryName
        var candidates: [(String, String)] = []
        for name in (try? SpoolSetAsideStore.recordFiles(rejected)) ?? [] {
            candidates.append(("set_aside", rejected + "/" + name))
        }
        for name in (try? SpoolFileSystem.list(directory)) ?? [] where name.hasSuffix(NotificationSpool.tornSuffix) {
            candidates.append(("torn", directory + "/" + name))
        }
        var expired: [Expired] = []
        for (kind, path) in candidates {
            let judgeAndDelete = { () throws(SpoolError) -> Expired? in
                guard let modified = SpoolFileSystem.regularFileStatus(path)?.modified else { return nil }
                let age = now - modified
                guard age > Int64(days) * 86_400 else { return nil }
                try SpoolFileSystem.remove(path)
                return Expired(kind: kind, path: path, ageDays: Int(age / 86_400))
            }
            let deleted =
                kind == "set_aside"
                ? try? SpoolFileSystem.withDirectoryLock(rejected, wait: lockWait, judgeAndDelete)
                : try? judgeAndDelete()
            if let deleted = deleted ?? nil { expired.append(deleted) }
        }
        return expired
    }

    private static func modifiedMilliseconds(_ path: String) -> Int64? {
        SpoolFileSystem.status(path).map { $0.modified * 1000 }
    }
}
