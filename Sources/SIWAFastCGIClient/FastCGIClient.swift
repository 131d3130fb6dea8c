import Foundation
import Glibc
import SIWASupport

/// nginx's side of FastCGI, written from the protocol specification in plain Swift over
/// Glibc sockets (no libfcgi, so it checks the server rather than agreeing with it): one
/// responder request per `send`. Its own module, outside the production server: the tests,
/// `siwa-endpoint status` and `siwa-endpoint load` drive the responder with it.
public struct FastCGIClient: Sendable {
    public enum Endpoint: Sendable, CustomStringConvertible {
        case unixSocket(String)
        case tcp(host: String = "127.0.0.1", port: UInt16)

        public var description: String {
            switch self {
            case .unixSocket(let path): "unix:\(path)"
            case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            }
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String

        public init(description: String) { self.description = description }
    }

    /// The CGI response parsed from STDOUT, plus the END_REQUEST values.
    public struct Response: Sendable {
        public var status: Int
        public var headers: [(name: String, value: String)]
        public var body: [UInt8]
        public var stderr: [UInt8]
        public var appStatus: UInt32
        public var protocolStatus: UInt8

        public init(
            status: Int, headers: [(name: String, value: String)], body: [UInt8], stderr: [UInt8], appStatus: UInt32,
            protocolStatus: UInt8
        ) {
            self.status = status
            self.headers = headers
            self.body = body
            self.stderr = stderr
            self.appStatus = appStatus
            self.protocolStatus = protocolStatus
        }

        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }

        public var bodyText: String { String(decoding: body, as: UTF8.self) }
    }

    public let endpoint: Endpoint
    public let timeout: Duration

    public init(_ endpoint: Endpoint, timeout: Duration = .seconds(10)) {
        self.endpoint = endpoint
        self.timeout = timeout
    }

    /// One request on a fresh connection, closed afterwards.
    public func send(params: [(String, String)], body: [UInt8] = []) throws -> Response {
        let connection = try connect()
        defer { connection.close() }
        return try connection.send(params: params, body: body, keepConnection: false)
    }

    /// The parameters nginx's fastcgi_params would send for a request, with `extra` added.
    public static func params(
        method: String, uri: String, body: [UInt8] = [], contentType: String? = nil,
        extra: [(String, String)] = []
    ) -> [(String, String)] {
        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var params: [(String, String)] = [
            ("GATEWAY_INTERFACE", "CGI/1.1"), ("SERVER_PROTOCOL", "HTTP/1.1"),
            ("REQUEST_METHOD", method), ("REQUEST_URI", uri), ("DOCUMENT_URI", String(parts[0])),
            ("SCRIPT_NAME", String(parts[0])), ("QUERY_STRING", parts.count > 1 ? String(parts[1]) : ""),
            ("REMOTE_ADDR", "127.0.0.1"), ("REMOTE_PORT", "40000"), ("SERVER_NAME", "localhost"),
            ("CONTENT_LENGTH", body.isEmpty && method == "GET" ? "" : String(body.count)),
        ]
        if let contentType { params.append(("CONTENT_TYPE", contentType)) }
        return params + extra
    }

    public func connect() throws -> Connection {
        let address: SocketAddress
        do throws(SocketAddress.Invalid) {
            switch endpoint {
            case .unixSocket(let path): address = try SocketAddress.unixSocket(path: path)
            case .tcp(let host, let port): address = try SocketAddress.internet(host: host, port: port)
            }
        } catch {
            throw Failure(description: error == .pathTooLong ? "unix socket path too long" : "not an IP address")
        }
        let fd = address.makeStreamSocket()
        guard fd >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        guard address.connect(fd) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw Failure(description: "connect \(endpoint): errno \(code)")
        }
        return Connection(fd: fd, timeout: timeout)
    }

    /// One connection; with `keepConnection` it carries several requests, as nginx's
    /// `fastcgi_keep_conn on` does.
    public final class Connection {
        private let fd: Int32
        private let timeout: Duration
        private var nextRequestID: UInt16 = 1
        private var closed = false

        public init(fd: Int32, timeout: Duration) {
            self.fd = fd
            self.timeout = timeout
            var value = timeout.timeValue
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        }

        deinit { close() }

        public func close() {
            guard !closed else { return }
            closed = true
            Glibc.close(fd)
        }

        public func send(params: [(String, String)], body: [UInt8] = [], keepConnection: Bool) throws -> Response {
            let (requestID, out) = records(params: params, body: body, keepConnection: keepConnection)
            try writeAll(out)
            return try readResponse(requestID: requestID)
        }

        /// Sends a request but the body after its first `sentBodyBytes` bytes (and the body's
        /// end), so the responder holds it part way through its body; `finish` on the answer
        /// sends the rest and reads the response. The body must be under 64 KiB.
        public func sendHoldingBack(params: [(String, String)], body: [UInt8], sentBodyBytes: Int) throws
            -> HeldRequest
        {
            let (requestID, whole) = records(params: params, body: [], keepConnection: false)
            // `whole` ends with the body's end (an empty STDIN record, 8 bytes): the body goes before it.
            var sent = Array(whole.dropLast(8))
            let split = min(sentBodyBytes, body.count)
            FastCGIClient.appendRecord(&sent, type: 5, requestID: requestID, content: body[..<split])
            var rest: [UInt8] = []
            FastCGIClient.appendRecord(&rest, type: 5, requestID: requestID, content: body[split...])
            FastCGIClient.appendRecord(&rest, type: 5, requestID: requestID, content: [])
            try writeAll(sent)
            return HeldRequest(connection: self, requestID: requestID, rest: rest)
        }

        /// A request sent but for its last bytes (`sendHoldingBack`).
        public struct HeldRequest {
            let connection: Connection
            let requestID: UInt16
            let rest: [UInt8]

            /// Sends the bytes held back and reads the response.
            public func finish() throws -> Response {
                try connection.writeAll(rest)
                return try connection.readResponse(requestID: requestID)
            }
        }

        /// The records of one request (BEGIN_REQUEST, PARAMS, STDIN) and its ID.
        private func records(params: [(String, String)], body: [UInt8], keepConnection: Bool) -> (UInt16, [UInt8]) {
            let requestID = nextRequestID
            nextRequestID &+= 1
            var out: [UInt8] = []
            FastCGIClient.appendRecord(
                &out, type: 1, requestID: requestID, content: [0, 1, keepConnection ? 1 : 0, 0, 0, 0, 0, 0])
            let encoded = params.reduce(into: [UInt8]()) { bytes, pair in
                FastCGIClient.appendLength(&bytes, pair.0.utf8.count)
                FastCGIClient.appendLength(&bytes, pair.1.utf8.count)
                bytes += Array(pair.0.utf8) + Array(pair.1.utf8)
            }
            FastCGIClient.appendStream(&out, type: 4, requestID: requestID, content: encoded)
            FastCGIClient.appendStream(&out, type: 5, requestID: requestID, content: body)
            return (requestID, out)
        }

        /// Bytes written on this connection that the responder has not read yet (the
        /// kernel's send queue, `SIOCOUTQ`); nil when it cannot be asked. A test sees by it
        /// that a worker has really taken up a request it sent part of.
        public var unreadByPeer: Int? {
            var count: Int32 = 0
            return ioctl(fd, UInt(TIOCOUTQ), &count) == 0 ? Int(count) : nil
        }

        /// Writes raw bytes: lets a test send a request in pieces, or only part of one.
        public func writeAll(_ bytes: [UInt8]) throws {
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { throw Failure(description: "write: errno \(errno)") }
                offset += written
            }
        }

        private func readResponse(requestID: UInt16) throws -> Response {
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: timeout)
            var stdout: [UInt8] = []
            var stderr: [UInt8] = []
            while clock.now < deadline {
                let header = try readExactly(8)
                let type = header[1]
                let id = UInt16(header[2]) << 8 | UInt16(header[3])
                let length = Int(header[4]) << 8 | Int(header[5])
                let content = try readExactly(length)
                _ = try readExactly(Int(header[6]))
                guard id == requestID else { continue }
                switch type {
                case 6: stdout += content
                case 7: stderr += content
                case 3:
                    guard content.count >= 5 else { throw Failure(description: "short END_REQUEST") }
                    let appStatus = content[0..<4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
                    var response = try FastCGIClient.parseCGI(stdout)
                    response.stderr = stderr
                    response.appStatus = appStatus
                    response.protocolStatus = content[4]
                    return response
                default: continue
                }
            }
            throw Failure(description: "no END_REQUEST within \(timeout)")
        }

        /// Everything until the peer closes (bounded by the timeout): for non-FastCGI replies.
        public func readToEnd() throws -> [UInt8] {
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let got = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if got < 0 && errno == EINTR { continue }
                guard got >= 0 else { throw Failure(description: "read: errno \(errno)") }
                if got == 0 { return bytes }
                bytes += chunk[0..<got]
            }
        }

        private func readExactly(_ count: Int) throws -> [UInt8] {
            var bytes = [UInt8](repeating: 0, count: count)
            var offset = 0
            while offset < count {
                let got = bytes[offset...].withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else {
                    throw Failure(description: got == 0 ? "connection closed by server" : "read: errno \(errno)")
                }
                offset += got
            }
            return bytes
        }
    }

    public static func appendRecord(_ out: inout [UInt8], type: UInt8, requestID: UInt16, content: ArraySlice<UInt8>) {
        let padding = (8 - content.count % 8) % 8
        out += [
            1, type, UInt8(requestID >> 8), UInt8(requestID & 0xff), UInt8(content.count >> 8),
            UInt8(content.count & 0xff), UInt8(padding), 0,
        ]
        out += content
        out += [UInt8](repeating: 0, count: padding)
    }

    public static func appendRecord(_ out: inout [UInt8], type: UInt8, requestID: UInt16, content: [UInt8]) {
        appendRecord(&out, type: type, requestID: requestID, content: content[...])
    }

    /// A stream (PARAMS, STDIN): records of at most 65535 bytes, then an empty record.
    public static func appendStream(_ out: inout [UInt8], type: UInt8, requestID: UInt16, content: [UInt8]) {
        var offset = 0
        while offset < content.count {
            let end = min(offset + 65535, content.count)
            appendRecord(&out, type: type, requestID: requestID, content: content[offset..<end])
            offset = end
        }
        appendRecord(&out, type: type, requestID: requestID, content: [])
    }

    /// Name-value pair lengths: one byte below 128, else four bytes with the top bit set.
    public static func appendLength(_ out: inout [UInt8], _ length: Int) {
        if length < 128 {
            out.append(UInt8(length))
        } else {
            out += [
                UInt8((length >> 24) & 0x7f) | 0x80, UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff),
                UInt8(length & 0xff),
            ]
        }
    }

    /// CGI output: header lines up to an empty line, `Status: NNN reason` (200 when absent).
    public static func parseCGI(_ stdout: [UInt8]) throws -> Response {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        var bodyStart = 0
        if stdout.count >= 4 {
            for index in 0...(stdout.count - 4) where Array(stdout[index..<index + 4]) == separator {
                headEnd = index
                bodyStart = index + 4
                break
            }
        }
        guard let headEnd else { throw Failure(description: "no end of CGI headers in STDOUT") }
        let head = String(decoding: stdout[0..<headEnd], as: UTF8.self)
        var status = 200
        var headers: [(name: String, value: String)] = []
        for line in head.components(separatedBy: "\r\n") where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw Failure(description: "bad header line") }
            let name = String(line[..<colon])
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if name.lowercased() == "status" {
                guard let code = Int(value.prefix(3)) else { throw Failure(description: "bad Status header") }
                status = code
            }
            headers.append((name, value))
        }
        return Response(
            status: status, headers: headers, body: Array(stdout[bodyStart...]), stderr: [], appStatus: 0,
            protocolStatus: 0)
    }
}
