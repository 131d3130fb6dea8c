/// What the handler answers: a status, headers and body bytes, written back as a CGI
/// response (`Status: 200 OK\r\nContent-Type: ...\r\n\r\nbody`).
public struct FastCGIResponse: Sendable, Equatable {
    public var status: Int
    /// In order. Names and values are written as given, minus any CR, LF or NUL, so that a
    /// value can never start a header of its own.
    public var headers: [Header]
    public var body: [UInt8]

    public struct Header: Sendable, Equatable {
        public var name: String
        public var value: String

        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    public init(status: Int, headers: [Header] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A response with a `Content-Type` and a UTF-8 body.
    public init(status: Int, contentType: String, body: String, headers: [Header] = []) {
        self.init(status: status, headers: [Header("Content-Type", contentType)] + headers, body: Array(body.utf8))
    }

    /// The bytes on the FastCGI STDOUT stream. A `Content-Length` is added when the handler
    /// gave none, so nginx can keep the client connection alive. Built in one buffer, which
    /// the worker hands to libfcgi in one call.
    public func serialized() -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(160 + body.count)
        output.append(contentsOf: "Status: ".utf8)
        output.append(contentsOf: String(status).utf8)
        output.append(UInt8(ascii: " "))
        output.append(contentsOf: Self.reasonPhrase(status).utf8)
        output.append(contentsOf: "\r\n".utf8)
        var hasLength = false
        for header in headers {
            let name = Self.cleanBytes(header.name)
            guard !name.isEmpty, !name.contains(UInt8(ascii: ":")) else { continue }
            if Self.isContentLength(name) { hasLength = true }
            output.append(contentsOf: name)
            output.append(contentsOf: ": ".utf8)
            output.append(contentsOf: Self.cleanBytes(header.value))
            output.append(contentsOf: "\r\n".utf8)
        }
        if !hasLength {
            output.append(contentsOf: "Content-Length: ".utf8)
            output.append(contentsOf: String(body.count).utf8)
            output.append(contentsOf: "\r\n".utf8)
        }
        output.append(contentsOf: "\r\n".utf8)
        output.append(contentsOf: body)
        return output
    }

    /// The UTF-8 bytes of `text` without CR, LF or NUL (bytes that never occur inside a
    /// multi-byte UTF-8 sequence, so this removes exactly those three characters).
    static func cleanBytes(_ text: String) -> [UInt8] {
        let bytes = Array(text.utf8)
        guard bytes.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else { return bytes }
        return bytes.filter { $0 != 0x0D && $0 != 0x0A && $0 != 0 }
    }

    /// `Content-Length` in any letter case.
    private static func isContentLength(_ name: [UInt8]) -> Bool {
        let wanted = "content-length".utf8
        guard name.count == wanted.count else { return false }
        return zip(name, wanted).allSatisfy { pair in
            let lower = (pair.0 >= 0x41 && pair.0 <= 0x5A) ? pair.0 + 0x20 : pair.0
            return lower == pair.1
        }
    }

    /// The phrases this endpoint can produce; anything else gets a generic one by class.
    public static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 202: "Accepted"
        case 204: "No Content"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 411: "Length Required"
        case 413: "Content Too Large"
        case 415: "Unsupported Media Type"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 200..<300: "Success"
        case 300..<400: "Redirection"
        case 400..<500: "Client Error"
        default: "Server Error"
        }
    }
}
