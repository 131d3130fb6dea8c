import Foundation
import SIWAJSON
import SIWASupport
import Synchronization

/// A warning that comes again and again for as long as one condition lasts (the sentinels
/// naming an address that cannot be reached: every discovery during an outage, twice a
/// second) is logged when it starts or changes, then as one summary line every
/// `summaryInterval` while it lasts, and once more when it ends if repeats went unlogged.
/// A summary is the same event with `repeats` (times seen since `since`, the wall time of
/// the first) added, so one search finds the start, the summaries and the end.
public final class RepeatedEventLog: Sendable {
    public typealias Writer = @Sendable (_ event: String, _ level: String, _ fields: [(String, JSONValue)]) -> Void

    public let event: String
    public let level: String
    public let summaryInterval: Duration
    private let clock: EndpointClock
    private let write: Writer

    private struct Running {
        /// What the condition is: another key is a change, logged at once.
        var key: String
        /// The fields of the line that started it, repeated in its summaries.
        var fields: [(String, JSONValue)]
        var sinceMilliseconds: Int64
        var repeats: Int
        /// Repeats seen since the last line written.
        var unlogged: Int
        var lastLineAt: ContinuousClock.Instant
    }

    private let state = Mutex<Running?>(nil)

    public init(
        event: String, level: String = "warning", summaryInterval: Duration = .seconds(30),
        clock: EndpointClock = .system,
        write: @escaping Writer = { event, level, fields in EventLog.event(event, level: level, fields) }
    ) {
        self.event = event
        self.level = level
        self.summaryInterval = summaryInterval
        self.clock = clock
        self.write = write
    }

    /// The condition named `key` was seen (again); `fields` are its line's.
    public func record(key: String, _ fields: [(String, JSONValue)]) {
        let now = clock.monotonic()
        state.withLock { running in
            guard var current = running, current.key == key else {
                if let previous = running { summarise(previous) }
                running = Running(
                    key: key, fields: fields, sinceMilliseconds: clock.wallMilliseconds(), repeats: 1, unlogged: 0,
                    lastLineAt: now)
                write(event, level, fields)
                return
            }
            current.repeats += 1
            current.unlogged += 1
            if now - current.lastLineAt >= summaryInterval {
                summarise(current)
                current.unlogged = 0
                current.lastLineAt = now
            }
            running = current
        }
    }

    /// The condition is over (the primary was found): its unlogged repeats in one last
    /// summary, and the next occurrence is logged at once.
    public func end() {
        state.withLock { running in
            if let previous = running { summarise(previous) }
            running = nil
        }
    }

    /// A summary line, when repeats went unlogged since the last line.
    private func summarise(_ running: Running) {
        guard running.unlogged > 0 else { return }
        write(
            event, level,
            running.fields + [
                ("repeats", .integer(Int64(running.repeats))),
                ("since", .string(EventLog.wallTime(milliseconds: running.sinceMilliseconds))),
            ])
    }
}
