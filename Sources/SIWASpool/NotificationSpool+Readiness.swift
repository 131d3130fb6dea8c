/// What readiness and `/metrics` read of the spool: whether it takes a write now, and how
/// long its oldest waiting record has waited.
extension NotificationSpool {
    /// Whether a small file can be created, written and fsynced in the spool directory now
    /// (its own probe file, apart from the one `checkWritable` uses).
    package func acceptsWrites() -> Bool {
        SpoolFileSystem.canWrite(in: directory, probeName: ".ready-check")
    }

    /// When the first waiting record was spooled (Unix ms; its segment's modification time
    /// for a record of an earlier release), reading the segments only up to the first that
    /// holds one. Nil when nothing waits or the spool cannot be read.
    package func oldestWaitingSpooledAt() -> Int64? {
        do throws(SpoolError) {
            let position =
                try SpoolPositionFile.read(directory + "/" + Self.positionFileName)?.position
                ?? SpoolPosition(sequence: 0, offset: 0)
            for sequence in try Self.segmentSequences(directory) {
                let path = Self.segmentPath(directory, sequence)
                let counted = try SpoolSegmentReader.countRecords(
                    path: path, from: position.sequence == sequence ? position.offset : 0)
                if counted.count > 0 {
                    return counted.firstSpooledAt ?? SpoolFileSystem.status(path).map { $0.modified * 1000 }
                }
            }
            return nil
        } catch {
            return nil
        }
    }
}
