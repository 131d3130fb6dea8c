import Foundation
import SIWASupport
import SIWAVerification
import Synchronization

/// The writer: appends with a group commit (one fsync for the records written before it).
extension NotificationSpool {
    /// Appends one record and fsyncs it. When this returns the notification survives a
    /// crash, and only then may the responder answer 200; when it throws, answer 503 (and
    /// nothing of this record is left behind: no partial line, no empty segment).
    /// `attemptedAt`: the receive time of the Redis call that did not answer, if one was made.
    ///
    /// Group commit: the record is written under the writer lock, then made durable by one
    /// `fsync` that covers every record written before it began. One writer runs that fsync
    /// at a time, outside the lock; writers that arrive meanwhile write their records and
    /// wait, and the next fsync covers them all. So N concurrent appends cost about one or
    /// two fsyncs, not N, and none returns before an fsync that began after its write.
    public func append(_ notification: VerifiedNotification, attemptedAt: Int64? = nil) throws(SpoolError) {
        try appendDurably(
            SpoolRecord.encode(notification, spooledAt: clock.wallMilliseconds(), attemptedAt: attemptedAt))
    }

    /// Appends Google's verified Security Event Token as `append` appends Apple's
    /// notification, in the same line of records: durable when this returns (only then may
    /// the responder answer 202), nothing of it left behind when it throws (answer 503).
    public func append(_ securityEvent: VerifiedSecurityEvent, attemptedAt: Int64? = nil) throws(SpoolError) {
        try appendDurably(
            SpoolRecord.encode(securityEvent, spooledAt: clock.wallMilliseconds(), attemptedAt: attemptedAt))
    }

    private func appendDurably(_ line: [UInt8]) throws(SpoolError) {
        do throws(SpoolError) {
            let ticket = try write(line)
            try waitUntilDurable(ticket)
        } catch {
            writeFailure.withLock { $0 = error }
            throw error
        }
        writeFailure.withLock { $0 = nil }
    }

    /// Where a written record ends, in which opening of a segment (internal: the writer's
    /// tests write, then change the state, then wait).
    struct Ticket {
        let generation: UInt64
        let end: Int
    }

    /// Writes the line at the end of the open segment (opening one if needed). Waits while
    /// an fsync runs only when the segment must be closed first.
    func write(_ line: [UInt8]) throws(SpoolError) -> Ticket {
        while true {
            let step = try writer.withLock { (state: inout Writer) throws(SpoolError) -> Step<Ticket> in
                if state.descriptor != nil,
                    state.mustRotate || (state.size > 0 && state.size + line.count > segmentByteLimit)
                {
                    guard !state.syncing else { return .wait }
                    closeOpenSegment(&state)
                }
                let descriptor = try openSegmentIfNeeded(&state)
                let path = Self.segmentPath(directory, state.sequence)
                do throws(SpoolError) {
                    try SpoolFileSystem.writeAll(descriptor, line, code: .writeFailed, path: path)
                } catch {
                    // Take back a partial record; later records go to a new segment. What
                    // stays in this one is whole records of other writers, still to be
                    // fsynced. A segment that holds nothing goes: a full disk must not
                    // fill up with names.
                    _ = SpoolFileSystem.truncate(descriptor, to: state.size)
                    state.mustRotate = true
                    if state.size == 0 && !state.syncing { closeOpenSegment(&state) }
                    throw error
                }
                state.size += line.count
                state.cut.issued(generation: state.generation)
                return .done(Ticket(generation: state.generation, end: state.size))
            }
            switch step {
            case .done(let ticket): return ticket
            case .wait: waitForSync()
            }
        }
    }

    /// Returns once an fsync that began after the ticket's write has succeeded; throws when
    /// the fsync that covered it failed (the record was then cut from the segment).
    func waitUntilDurable(_ ticket: Ticket) throws(SpoolError) {
        enum Next {
            case durable
            case failed(SpoolError)
            case wait
            case sync(descriptor: Int32, target: Int, path: String)
        }
        while true {
            let next = writer.withLock { (state: inout Writer) -> Next in
                if let failure = state.cut.failure(generation: ticket.generation, end: ticket.end) {
                    state.cut.settled(generation: ticket.generation)
                    return .failed(failure)
                }
                if ticket.generation != state.generation || state.syncedSize >= ticket.end {
                    // Durable: closing a segment fsyncs it first, or records the cut, which
                    // is kept until this writer has asked (SpoolCutRecords).
                    state.cut.settled(generation: ticket.generation)
                    if ticket.generation == state.generation { state.appendedSinceSeal += 1 }
                    waiting.add(1, ordering: .relaxed)
                    return .durable
                }
                guard !state.syncing, let descriptor = state.descriptor else { return .wait }
                state.syncing = true
                return .sync(
                    descriptor: descriptor, target: state.size, path: Self.segmentPath(directory, state.sequence))
            }
            switch next {
            case .durable: return
            case .failed(let error): throw error
            case .wait: waitForSync()
            case .sync(let descriptor, let target, let path):
                // Outside the lock: other writers go on writing, and the next fsync takes them.
                let result: SpoolError?
                do throws(SpoolError) {
                    try SpoolFileSystem.sync(descriptor, path: path)
                    result = nil
                } catch {
                    result = error
                }
                writer.withLock { (state: inout Writer) in
                    state.syncing = false
                    if let result {
                        failOpenSegment(&state, result)
                    } else {
                        state.syncedSize = max(state.syncedSize, target)
                    }
                }
                ringSyncDoorbell()
            }
        }
    }

    /// Opens a new segment (made durable in its directory) when none is open.
    private func openSegmentIfNeeded(_ state: inout Writer) throws(SpoolError) -> Int32 {
        if let open = state.descriptor { return open }
        state.sequence += 1
        let descriptor = try SpoolFileSystem.createForAppend(
            Self.segmentPath(directory, state.sequence), mode: Self.fileMode)
        do throws(SpoolError) {
            try SpoolFileSystem.syncDirectory(directory)
        } catch {
            SpoolFileSystem.close(descriptor)
            try? SpoolFileSystem.remove(Self.segmentPath(directory, state.sequence))
            throw error
        }
        state.descriptor = descriptor
        state.size = 0
        state.syncedSize = 0
        state.mustRotate = false
        return descriptor
    }

    /// Closes the open segment (no fsync may be running on it): what was written and not yet
    /// fsynced is fsynced first, so writers waiting for it learn it is durable, or, if that
    /// fsync fails, that their records were cut. An empty segment is removed.
    func closeOpenSegment(_ state: inout Writer) {
        guard let descriptor = state.descriptor else { return }
        precondition(!state.syncing, "a segment was closed while an fsync ran on it")
        if state.size > state.syncedSize {
            do throws(SpoolError) {
                try SpoolFileSystem.sync(descriptor, path: Self.segmentPath(directory, state.sequence))
                state.syncedSize = state.size
            } catch {
                failOpenSegment(&state, error)
                return
            }
        }
        SpoolFileSystem.close(descriptor)
        if state.size == 0 {
            try? SpoolFileSystem.remove(Self.segmentPath(directory, state.sequence))
            try? SpoolFileSystem.syncDirectory(directory)
        }
        state.descriptor = nil
        state.generation += 1
    }

    /// An fsync of the open segment failed: every record written since the last good fsync
    /// fails, is cut from the file, and the file is never written again.
    private func failOpenSegment(_ state: inout Writer, _ error: SpoolError) {
        guard let descriptor = state.descriptor else { return }
        state.cut.cut(generation: state.generation, from: state.syncedSize, error: error)
        _ = SpoolFileSystem.truncate(descriptor, to: state.syncedSize)
        SpoolFileSystem.close(descriptor)
        if state.syncedSize == 0 {
            try? SpoolFileSystem.remove(Self.segmentPath(directory, state.sequence))
            try? SpoolFileSystem.syncDirectory(directory)
        }
        state.descriptor = nil
        state.size = state.syncedSize
        state.generation += 1
    }

    /// Waits until the running fsync ends (bounded, then the caller looks again).
    func waitForSync() {
        syncDoorbell.lock()
        defer { syncDoorbell.unlock() }
        if writer.withLock({ $0.syncing }) { _ = syncDoorbell.wait(until: Date(timeIntervalSinceNow: 0.05)) }
    }

    func ringSyncDoorbell() {
        syncDoorbell.lock()
        syncDoorbell.broadcast()
        syncDoorbell.unlock()
    }
}
