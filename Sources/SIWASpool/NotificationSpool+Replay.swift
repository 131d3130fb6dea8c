import Foundation
import SIWASupport
import SIWAVerification
import Synchronization

/// The replay: applies the waiting records in order, committing the position per batch.
extension NotificationSpool {
    /// Applies the waiting records in the order they were appended, oldest segment first.
    ///
    /// Stops at the first `Stop` that `step` throws: that record and all later ones stay for
    /// the next replay. Records taken are committed (the replay position saved durably) once
    /// per batch and whenever the pass stops, so a crash re-applies at most one batch. Torn or
    /// corrupt records are moved to `.torn` files and listed in the report. Records appended
    /// while a replay runs go to a new segment and wait for the next replay. `step` says what
    /// became of each record (stored with Redis's outcome, or rejected and kept in
    /// `rejected/`); it gets each record's `attemptedAt` (see `append`) beside the notification.
    ///
    /// `securityEvent` takes Google's records (Security Event Tokens) the same way, in the
    /// same order among Apple's. Without it (a caller that never spools Google's tokens),
    /// one found is set aside with the torn bytes (`malformed`): kept, never applied as Apple's.
    ///
    /// `step` may call `append` but must not call `replay` (replays are one at a time, and
    /// a nested one would wait for itself). After the pass, the depth is recounted from disk.
    public func replay<Stop: Error>(
        _ step: (VerifiedNotification, _ attemptedAt: Int64?) throws(Stop) -> SpoolReplayStep,
        securityEvent: ((VerifiedSecurityEvent, _ attemptedAt: Int64?) throws(Stop) -> SpoolReplayStep)? = nil
    ) -> SpoolReplayReport<Stop> {
        position.withLock { (file: inout SpoolPositionFile) -> SpoolReplayReport<Stop> in
            var report = SpoolReplayReport<Stop>(taken: 0, torn: [], stop: nil, spoolError: nil, remaining: 0)
            var sealed: [UInt64] = []
            do throws(SpoolError) {
                sealed = try sealSegments()
                for sequence in sealed {
                    guard
                        try replaySegment(
                            sequence, file: &file, report: &report, step: step, securityEventStep: securityEvent)
                    else { break }
                }
            } catch {
                report.spoolError = error
            }
            recount(sealed: sealed, from: file.position)
            report.remaining = depth
            return report
        }
    }

    /// Applies the waiting records, counting every one as stored with outcome `applied`.
    public func replay<Stop: Error>(_ apply: (VerifiedNotification) throws(Stop) -> Void) -> SpoolReplayReport<Stop> {
        replay { (notification, _) throws(Stop) -> SpoolReplayStep in
            try apply(notification)
            return .stored(.applied)
        }
    }

    /// Sets the depth to what the disk holds: the records still waiting in the segments this
    /// pass listed, plus those appended since (which went to segments it did not list).
    private func recount(sealed: [UInt64], from saved: SpoolPosition) {
        var onDisk = 0
        for sequence in sealed {
            let start = saved.sequence == sequence ? saved.offset : 0
            guard
                let counted = try? SpoolSegmentReader.countRecords(
                    path: Self.segmentPath(directory, sequence), from: start)
            else { return }  // unreadable now: keep the running count rather than guess
            onDisk += counted.count
        }
        writer.withLock { state in waiting.store(onDisk + state.appendedSinceSeal, ordering: .relaxed) }
    }

    /// Seals the open segment, adopts requeued files, and returns every segment, oldest first.
    private func sealSegments() throws(SpoolError) -> [UInt64] {
        while true {
            let step = try writer.withLock { (state: inout Writer) throws(SpoolError) -> Step<[UInt64]> in
                guard !state.syncing else { return .wait }
                closeOpenSegment(&state)
                state.appendedSinceSeal = 0
                state.sequence = try Self.adoptRequeued(directory, after: state.sequence)
                return .done(try Self.segmentSequences(directory))
            }
            switch step {
            case .done(let sequences):
                ringSyncDoorbell()
                return sequences
            case .wait: waitForSync()
            }
        }
    }

    /// Replays one sealed segment and deletes it once done; false when the replay must stop.
    private func replaySegment<Stop: Error>(
        _ sequence: UInt64, file: inout SpoolPositionFile, report: inout SpoolReplayReport<Stop>,
        step: (VerifiedNotification, Int64?) throws(Stop) -> SpoolReplayStep,
        securityEventStep: ((VerifiedSecurityEvent, Int64?) throws(Stop) -> SpoolReplayStep)?
    ) throws(SpoolError) -> Bool {
        let path = Self.segmentPath(directory, sequence)
        let saved = file.position
        let start = saved.sequence == sequence ? saved.offset : 0
        guard let reader = try SpoolSegmentReader(path: path, offset: start) else { return true }
        // The position is saved once per batch (`positionBatchRecords`, `positionBatchInterval`), not per record:
        // a crash re-applies at most the batch taken since the last save, which Redis's jti
        // markers report as `duplicate`. A rejected or torn record is committed at once.
        var pending: SpoolPosition?
        var pendingCount = 0
        var lastSave = clock.monotonic()
        func commit() throws(SpoolError) {
            guard let next = pending else { return }
            try file.save(next)
            pending = nil
            pendingCount = 0
            lastSave = clock.monotonic()
        }
        do throws(SpoolError) {
            // One record taken by `apply`; false when the pass must stop at it.
            func take(_ apply: () throws(Stop) -> SpoolReplayStep, end: Int) throws(SpoolError) -> Bool {
                let taken: SpoolReplayStep
                do throws(Stop) {
                    taken = try apply()
                } catch {
                    report.stop = error
                    try commit()
                    return false
                }
                pending = SpoolPosition(sequence: sequence, offset: end)
                pendingCount += 1
                waiting.subtract(1, ordering: .relaxed)
                report.taken += 1
                report.steps[taken, default: 0] += 1
                if taken == .rejected || pendingCount >= positionBatchRecords
                    || clock.monotonic() - lastSave >= positionBatchInterval
                {
                    try commit()
                }
                return true
            }
            while true {
                let recordStart = reader.offset
                guard var entry = try reader.next() else { break }
                if case .securityEvent(_, _, _, let end) = entry, securityEventStep == nil {
                    entry = .bad(.malformed, start: recordStart, end: end)
                }
                switch entry {
                case .record(let notification, _, let attemptedAt, let end):
                    guard try take({ () throws(Stop) in try step(notification, attemptedAt) }, end: end) else {
                        return false
                    }
                case .securityEvent(let securityEvent, _, let attemptedAt, let end):
                    guard let securityEventStep else { continue }  // made `.bad` above
                    guard try take({ () throws(Stop) in try securityEventStep(securityEvent, attemptedAt) }, end: end)
                    else { return false }
                case .bad(let reason, let badStart, let end):
                    try commit()
                    let tornPath = Self.tornPath(directory, sequence)
                    // Set aside first, then move past: a crash in between copies the bytes twice, never zero times.
                    try SpoolFileSystem.appendRangeDurably(
                        from: path, badStart, end, to: tornPath, mode: Self.fileMode, directory: directory)
                    try file.save(SpoolPosition(sequence: sequence, offset: end))
                    report.torn.append(
                        SpoolTornRecord(
                            reason: reason, segmentFile: path, offset: badStart, byteCount: end - badStart,
                            tornFile: tornPath))
                }
            }
            try commit()
        } catch {
            // A read error mid-segment: keep what was taken before it (best effort).
            try? commit()
            throw error
        }
        try SpoolFileSystem.remove(path)
        do { try SpoolFileSystem.syncDirectory(directory) } catch {
            throw SpoolError(.removeFailed, error.message, errorNumber: error.errorNumber)
        }
        return true
    }
}
