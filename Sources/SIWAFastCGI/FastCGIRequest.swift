/// One request as nginx handed it over: every FastCGI parameter copied out of libfcgi at
/// once (its pointers die at the next accept), and the body read up to the configured limit.
public struct FastCGIRequest: Sendable {
    /// Every parameter nginx sent, by name (`REQUEST_METHOD`, `DOCUMENT_URI`, `HTTP_*`, ...),
    /// built when asked for; the accessors below look up only the names they need.
    public var params: [String: String] { parameters.dictionary }
    public let body: Body
    private let parameters: FastCGIParameters

    /// The request body, or why there is none to trust.
    public enum Body: Sendable, Equatable {
        /// The whole body, exactly `CONTENT_LENGTH` bytes when that was declared.
        case complete([UInt8])
        /// Over the body limit: answer 413. Detected from `CONTENT_LENGTH` before reading, or
        /// after reading one byte past the limit; never more than that is held in memory.
        case tooLarge
        /// The stream ended before (or ran past) the declared `CONTENT_LENGTH`, or the read
        /// timed out: the peer went away mid-request, so the bytes are not the message.
        case incomplete
    }

    public init(params: [String: String], body: Body) {
        self.init(parameters: FastCGIParameters(params), body: body)
    }

    init(parameters: FastCGIParameters, body: Body) {
        self.parameters = parameters
        self.body = body
    }

    /// One parameter's value, nil when nginx did not send it.
    public func param(_ name: String) -> String? { parameters.value(name) }

    public var method: String { param("REQUEST_METHOD") ?? "" }

    /// The path without the query: nginx's normalised `DOCUMENT_URI`, else
    /// `SCRIPT_NAME` + `PATH_INFO`, else `REQUEST_URI` cut at `?`.
    public var path: String {
        if let uri = param("DOCUMENT_URI"), !uri.isEmpty { return uri }
        let script = param("SCRIPT_NAME") ?? ""
        let info = param("PATH_INFO") ?? ""
        if !script.isEmpty || !info.isEmpty { return script + info }
        let requestURI = param("REQUEST_URI") ?? ""
        return String(requestURI.prefix { $0 != "?" })
    }

    public var queryString: String { param("QUERY_STRING") ?? "" }

    public var contentType: String? { param("CONTENT_TYPE").flatMap { $0.isEmpty ? nil : $0 } }

    /// `CONTENT_LENGTH` when it is a plain decimal number; nil when absent or empty.
    public var contentLength: Int? { parameters.contentLength }

    public var remoteAddress: String? { param("REMOTE_ADDR") }

    /// nginx's `$request_id`, passed as `REQUEST_ID` by our site file: it ties our log line
    /// to nginx's access log line. A client's own `X-Request-ID` header is never used: a
    /// sender must not choose what our log says.
    public var requestID: String? {
        guard let id = param("REQUEST_ID"), !id.isEmpty else { return nil }
        return id
    }

    /// Strict: ASCII digits only, no sign, no spaces, at most 18 significant digits (no overflow).
    static func parseLength(_ text: String) -> Int? { FastCGIParameters.parseLength(text) }
}
