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
    /// gave none, so nginx can keep the client connection alive.
    public func serialized() -> [UInt8] {
        var head = "Status: \(status) \(Self.reasonPhrase(status))\r\n"
        var hasLength = false
        for header in headers {
            let name = Self.clean(header.name)
            guard !name.isEmpty, !name.contains(":") else { continue }
            if name.lowercased() == "content-length" { hasLength = true }
            head += "\(name): \(Self.clean(header.value))\r\n"
        }
        if !hasLength { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        return Array(head.utf8) + body
    }

    static func clean(_ text: String) -> String {
        String(text.unicodeScalars.filter { $0 != "\r" && $0 != "\n" && $0 != "\0" })
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
