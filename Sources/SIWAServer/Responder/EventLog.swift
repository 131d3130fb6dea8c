import Foundation
import Glibc
import SIWAVerification

/// One JSON object per line on standard error: requests and lifecycle events.
///
/// Never a token, a request body or an email address: callers pass only the fields
/// named here, and free text is limited to messages the program itself wrote.
public enum EventLog {
    private static let lock = NSLock()

    /// One line per request.
    public static func request(
        requestID: String, method: String, path: String, status: Int, outcome: String, errorCode: String?,
        type: String?, clientID: String?, durationMilliseconds: Double, extra: [(String, JSONValue)] = []
    ) {
        var members: [(String, JSONValue)] = [
            ("time", .string(timestamp())), ("level", .string(status >= 500 ? "warning" : "info")),
            ("event", .string("request")), ("request_id", .string(requestID)), ("method", .string(method)),
            ("path", .string(path)), ("status", .integer(Int64(status))), ("outcome", .string(outcome)),
        ]
        if let errorCode { members.append(("error", .string(errorCode))) }
        if let type { members.append(("type", .string(type))) }
        if let clientID { members.append(("client_id", .string(clientID))) }
        members += extra
        members.append(("duration_ms", .number((durationMilliseconds * 1000).rounded() / 1000)))
        write(members)
    }

    /// A lifecycle line: start, stop, JWKS refresh, spool replay, a loud unknown type.
    public static func event(_ name: String, level: String = "info", _ fields: [(String, JSONValue)] = []) {
        write([("time", .string(timestamp())), ("level", .string(level)), ("event", .string(name))] + fields)
    }

    private static func write(_ members: [(String, JSONValue)]) {
        let line = Array((JSONWriter.object(members) + "\n").utf8)
        lock.lock()
        defer { lock.unlock() }
        // write(2), errors ignored: a full disk or a closed pipe must cost a log line,
        // never the process (FileHandle.write traps on failure).
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

    private static func timestamp() -> String {
        Date().formatted(
            .iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
    }
}
