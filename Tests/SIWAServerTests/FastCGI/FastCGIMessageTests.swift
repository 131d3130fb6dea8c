import Testing

@testable import SIWAFastCGI

@Suite("FastCGIMessages")
struct FastCGIMessageTests {
    @Test("path: DOCUMENT_URI, else SCRIPT_NAME + PATH_INFO, else REQUEST_URI without its query")
    func pathFallbacks() {
        let full = FastCGIRequest(
            params: ["DOCUMENT_URI": "/a", "SCRIPT_NAME": "/b", "PATH_INFO": "/c", "REQUEST_URI": "/d?q"],
            body: .complete([]))
        #expect(full.path == "/a")
        let script = FastCGIRequest(
            params: ["SCRIPT_NAME": "/b", "PATH_INFO": "/c", "REQUEST_URI": "/d?q"], body: .complete([]))
        #expect(script.path == "/b/c")
        let uri = FastCGIRequest(params: ["REQUEST_URI": "/d/e?q=1&r"], body: .complete([]))
        #expect(uri.path == "/d/e")
        #expect(FastCGIRequest(params: [:], body: .complete([])).path == "")
    }

    @Test("request id, content length and content type are read strictly")
    func namedParams() {
        let request = FastCGIRequest(
            params: ["HTTP_X_REQUEST_ID": "client-id", "CONTENT_LENGTH": "+12", "CONTENT_TYPE": ""],
            body: .complete([]))
        #expect(request.requestID == nil)
        #expect(request.contentLength == nil)
        #expect(request.contentType == nil)
        let nginx = FastCGIRequest(
            params: ["REQUEST_ID": "nginx-id", "HTTP_X_REQUEST_ID": "client-id", "CONTENT_LENGTH": "0042"],
            body: .complete([]))
        #expect(nginx.requestID == "nginx-id")
        #expect(nginx.contentLength == 42)
        #expect(FastCGIRequest.parseLength("9999999999999999999") == nil)
        #expect(FastCGIRequest.parseLength(" 1") == nil)
    }

    @Test("a response serialises to CGI bytes, with Content-Length added and header injection removed")
    func responseBytes() {
        let response = FastCGIResponse(
            status: 413, contentType: "application/json", body: #"{"error":"body_too_large"}"#,
            headers: [.init("X-Request-ID", "abc\r\nSet-Cookie: x=1"), .init("Bad:Name", "dropped")])
        let text = String(decoding: response.serialized(), as: UTF8.self)
        #expect(
            text
                == "Status: 413 Content Too Large\r\nContent-Type: application/json\r\n"
                + "X-Request-ID: abcSet-Cookie: x=1\r\nContent-Length: 26\r\n\r\n{\"error\":\"body_too_large\"}")
        let explicit = FastCGIResponse(status: 204, headers: [.init("content-length", "0")])
        #expect(
            String(decoding: explicit.serialized(), as: UTF8.self)
                == "Status: 204 No Content\r\ncontent-length: 0\r\n\r\n")
        #expect(FastCGIResponse.reasonPhrase(418) == "Client Error")
    }

    @Test("parameters read from a PARAMS stream: looked up whole, a value may hold = or be empty or not UTF-8")
    func parametersFromAStream() throws {
        let parameters = try FastCGIParameters(
            reading: FastCGIParameterReadingTests.stream([
                ("REQUEST_METHOD", "POST"), ("PATH_INFO", "/x"), ("QUERY_STRING", "a=b"), ("CONTENT_TYPE", ""),
                ("DOCUMENT_URI", "/caf\u{E9}"),
            ])[...])
        let request = FastCGIRequest(parameters: parameters, body: .complete([]))
        #expect(request.method == "POST")
        #expect(request.queryString == "a=b")
        #expect(request.path == "/caf\u{E9}")
        #expect(request.param("PATH") == nil)
        #expect(request.param("PATH_INF") == nil)
        #expect(request.param("PATH_INFO") == "/x")
        #expect(request.param("CONTENT_TYPE") == "")
        #expect(request.contentType == nil)
        #expect(
            request.params == [
                "REQUEST_METHOD": "POST", "PATH_INFO": "/x", "QUERY_STRING": "a=b", "CONTENT_TYPE": "",
                "DOCUMENT_URI": "/caf\u{E9}",
            ])
    }

    @Test("a handler's Content-Length in any letter case is kept and none is added")
    func contentLengthAnyCase() {
        let response = FastCGIResponse(status: 200, headers: [.init("CONTENT-Length", "2")], body: Array("ok".utf8))
        #expect(
            String(decoding: response.serialized(), as: UTF8.self) == "Status: 200 OK\r\nCONTENT-Length: 2\r\n\r\nok")
    }
}
