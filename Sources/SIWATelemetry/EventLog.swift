import Foundation
import Glibc
import SIWAJSON
import SIWAVerification
import Synchronization

/// One JSON object per line: requests and lifecycle events, on standard error by default.
///
/// Never a token, a request body or an email address: callers pass only the fields
/// named here, and free text is limited to messages the program itself wrote.
///
/// The lines are made here and written by a `Sink`: the responder and the spool replayer
/// are handed theirs (standard error in serve, a list in a test that reads what they
/// log); the static `event`, `request` and `emit` write to standard error.
public enum EventLog {
    /// Where lines go: each call of `write` is one whole line, newline included.
    public struct Sink: Sendable {
        private let write: @Sendable ([UInt8]) -> Void

        public init(_ write: @escaping @Sendable ([UInt8]) -> Void) { self.write = write }

        /// Standard error, one write(2) per line (see `EventLog.event`).
        public static let standardError = Sink { EventLog.write($0) }

        /// A lifecycle line (see `EventLog.event`).
        public func event(_ name: String, level: String = "info", _ fields: [(String, JSONValue)] = []) {
            write(EventLog.eventLine(name, level: level, fields))
        }

        /// A request's line (see `EventLog.request`).
        public func request(
            requestID: String, method: String, path: String, status: Int, outcome: String, errorCode: String?,
            type: String?, clientID: String?, durationMilliseconds: Double, extra: [(String, JSONValue)] = []
        ) {
            write(
                EventLog.requestLine(
                    requestID: requestID, method: method, path: path, status: status, outcome: outcome,
                    errorCode: errorCode, type: type, clientID: clientID, durationMilliseconds: durationMilliseconds,
                    extra: extra))
        }
    }

    /// Held for each line's write(2)s (one line may need more than one write).
    private static let writing = Mutex(())

    /// One line per request, on standard error.
    public static func request(
        requestID: String, method: String, path: String, status: Int, outcome: String, errorCode: String?,
        type: String?, clientID: String?, durationMilliseconds: Double, extra: [(String, JSONValue)] = []
    ) {
        write(
            requestLine(
                requestID: requestID, method: method, path: path, status: status, outcome: outcome,
                errorCode: errorCode, type: type, clientID: clientID, durationMilliseconds: durationMilliseconds,
                extra: extra))
    }

    /// The text of a request's line, newline included. Written straight into bytes: it is on
    /// every request's path.
    static func requestLine(
        requestID: String, method: String, path: String, status: Int, outcome: String, errorCode: String?,
        type: String?, clientID: String?, durationMilliseconds: Double, extra: [(String, JSONValue)]
    ) -> [UInt8] {
        var line: [UInt8] = []
        line.reserveCapacity(320)
        line.append(contentsOf: #"{"time":""#.utf8)
        appendTimestamp(to: &line)
        line.append(contentsOf: status >= 500 ? #"","level":"warning""#.utf8 : #"","level":"info""#.utf8)
        line.append(contentsOf: #","event":"request","request_id":"#.utf8)
        JSONWriter.writeString(requestID, to: &line)
        appendMember("method", method, to: &line)
        appendMember("path", path, to: &line)
        line.append(contentsOf: #","status":"#.utf8)
        line.append(contentsOf: String(status).utf8)
        appendMember("outcome", outcome, to: &line)
        if let errorCode { appendMember("error", errorCode, to: &line) }
        if let type { appendMember("type", type, to: &line) }
        if let clientID { appendMember("client_id", clientID, to: &line) }
        for (name, value) in extra {
            line.append(UInt8(ascii: ","))
            JSONWriter.writeString(name, to: &line)
            line.append(UInt8(ascii: ":"))
            JSONWriter.write(value, to: &line)
        }
        line.append(contentsOf: #","duration_ms":"#.utf8)
        JSONWriter.write(.number((durationMilliseconds * 1000).rounded() / 1000), to: &line)
        line.append(contentsOf: "}\n".utf8)
        return line
    }

    /// `,"name":"value"` (the name is one of ours and needs no escaping).
    private static func appendMember(_ name: StaticString, _ value: String, to line: inout [UInt8]) {
        line.append(contentsOf: #",""#.utf8)
        line.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        line.append(contentsOf: #"":"#.utf8)
        JSONWriter.writeString(value, to: &line)
    }

    /// A lifecycle line: start, stop, JWKS refresh, spool replay, a loud unknown type.
    public static func event(_ name: String, level: String = "info", _ fields: [(String, JSONValue)] = []) {
        write(eventLine(name, level: level, fields))
    }

    /// The text of a lifecycle line, newline included, for a command that prints it
    /// elsewhere (`serve --check` on standard output).
    public static func eventLine(_ name: String, level: String = "info", _ fields: [(String, JSONValue)] = [])
        -> [UInt8]
    {
        var line: [UInt8] = []
        JSONWriter.writeObject(
            [("time", .string(timestamp())), ("level", .string(level)), ("event", .string(name))] + fields,
            to: &line)
        line.append(UInt8(ascii: "\n"))
        return line
    }

    /// Writes a line made by `eventLine` (a command that also keeps it elsewhere).
    public static func emit(_ line: [UInt8]) { write(line) }

    /// One write(2) per line, so lines from several threads never interleave.
    static func write(_ line: [UInt8]) {
        // write(2), errors ignored: a full disk or a closed pipe must cost a log line,
        // never the process (FileHandle.write traps on failure).
        guard journalPriorities else {
            writing.withLock { _ in writeAll(line) }
            return
        }
        writing.withLock { _ in writeAll(journalPriorityPrefix(ofLineAt: line) + line) }
    }

    /// True when standard error is the journal's stream (sd-daemon(3): `JOURNAL_STREAM`
    /// names its device and inode): each line then starts with `<N>`, its syslog priority,
    /// which journald takes off (`SyslogLevelPrefix=`, on by default), so the journal keeps
    /// the JSON line at its priority. Anywhere else every line is plain JSON.
    static let journalPriorities: Bool = {
        guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
        var status = stat()
        guard fstat(2, &status) == 0 else { return false }
        return stream == "\(status.st_dev):\(status.st_ino)"
    }()

    /// `<3>` for error, `<4>` for warning, `<6>` for info: read from the line's own
    /// `"level"` member, which every line carries right after `time`.
    static func journalPriorityPrefix(ofLineAt line: [UInt8]) -> [UInt8] {
        let levels: [(member: String, priority: String)] = [
            (#""level":"error""#, "<3>"), (#""level":"warning""#, "<4>"), (#""level":"info""#, "<6>"),
        ]
        let head = String(decoding: line.prefix(80), as: UTF8.self)
        for (member, priority) in levels where head.contains(member) {
            return Array(priority.utf8)
        }
        return Array("<6>".utf8)
    }

    private static func writeAll(_ line: [UInt8]) {
        line.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(2, buffer.baseAddress! + offset, buffer.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }

    /// UTC, milliseconds: `2026-01-31T23:59:59.123Z`.
    private static func timestamp() -> String {
        var bytes: [UInt8] = []
        appendTimestamp(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A wall time given in Unix milliseconds, in the lines' own format (a field such as
    /// `since`).
    public static func wallTime(milliseconds: Int64) -> String {
        var bytes: [UInt8] = []
        appendTimestamp(
            to: &bytes,
            at: timespec(tv_sec: Int(milliseconds / 1000), tv_nsec: Int(milliseconds % 1000) * 1_000_000))
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The same text as `timestamp()`, from `clock_gettime` and `gmtime_r`: Foundation's
    /// ISO 8601 formatter showed in the profile of every request.
    private static func appendTimestamp(to output: inout [UInt8], at time: timespec? = nil) {
        var now = timespec()
        if let time { now = time } else { clock_gettime(CLOCK_REALTIME, &now) }
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            var value = value
            while divisor > 0 {
                output.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                value %= divisor
                divisor /= 10
            }
        }
        digits(Int(parts.tm_year) + 1900, 4)
        output.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mon) + 1, 2)
        output.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mday), 2)
        output.append(UInt8(ascii: "T"))
        digits(Int(parts.tm_hour), 2)
        output.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_min), 2)
        output.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_sec), 2)
        output.append(UInt8(ascii: "."))
        digits(now.tv_nsec / 1_000_000, 3)
        output.append(UInt8(ascii: "Z"))
    }
}
