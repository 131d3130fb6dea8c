import CCurl
import Glibc

/// Fetches one small document (GET) or posts one small form (POST) over HTTPS with
/// libcurl, or says exactly why not.
///
/// Foundation's URLSession on Linux cannot take a per-request CA file, so this is
/// the thin wrapper over libcurl: every libcurl pointer lives in this file.
/// Certificate and host checks are always on; redirects are never followed; the
/// body is capped; only https is spoken, except plain http to a loopback host
/// (a local test server or a sidecar), which is decided before any traffic.
/// Each fetch uses its own handle, so one fetcher is safe on many threads.
public struct HTTPSFetcher: Sendable {
    public static let defaultTimeoutSeconds = 5.0
    public static let defaultMaximumBytes = 1024 * 1024

    /// A PEM file of CA certificates to trust instead of the system store.
    public let caFilePath: String?
    /// The limit for the whole transfer: connect, TLS, request and body.
    public let timeoutSeconds: Double
    /// The largest body accepted.
    public let maximumBytes: Int

    public init(
        caFilePath: String? = nil, timeoutSeconds: Double = defaultTimeoutSeconds,
        maximumBytes: Int = defaultMaximumBytes
    ) {
        self.caFilePath = caFilePath
        self.timeoutSeconds = timeoutSeconds
        self.maximumBytes = maximumBytes
    }

    /// Checks `url` with the same libcurl URL parser and rules `fetch` applies (https, or
    /// plain http to a loopback host), so a setting is refused at start, not at the first fetch.
    public static func checkURL(_ url: String) throws(HTTPSFetchError) {
        guard globalInit == CURLE_OK else {
            throw HTTPSFetchError(.clientUnavailable, "libcurl global initialisation failed")
        }
        _ = try ParsedURL(url)
    }

    /// libcurl's global state, set up once per process before the first handle.
    private static let globalInit: CURLcode = siwa_curl_global_init()

    /// GETs `url` and returns the body of a 200 response.
    public func fetch(_ url: String) throws(HTTPSFetchError) -> [UInt8] {
        let response = try perform(url, postBody: nil)
        guard response.status == 200 else {
            throw HTTPSFetchError(
                .httpStatusNotOK, "the server answered HTTP \(response.status), not 200", httpStatus: response.status)
        }
        return response.body
    }

    /// POSTs `form` (`application/x-www-form-urlencoded`) to `url` and returns the
    /// response, whatever its status: the caller decides what a status means.
    /// The body sent is never part of an error message.
    public func post(
        _ url: String, form: [(name: String, value: String)], bearerToken: String? = nil
    ) throws(HTTPSFetchError) -> HTTPSResponse {
        let body = form.map { Self.formEncode($0.name) + "=" + Self.formEncode($0.value) }.joined(separator: "&")
        return try perform(url, postBody: body, bearerToken: bearerToken)
    }

    /// POSTs `body` (JSON, no NUL byte) with `headers` (`Name: value` lines) to `url` and
    /// returns the response, whatever its status. The connect phase has its own bound
    /// (`connectTimeoutSeconds`; the fetcher's timeout bounds the whole transfer). Unless
    /// `allowPrivateAddress`, every address libcurl is about to connect to is checked first
    /// (`PrivateAddress`): a loopback, private, link-local, CGNAT, multicast or unspecified one
    /// is refused before any packet is sent (`address_refused`), whatever name resolved to it.
    /// A name with several addresses is posted to the first one allowed that answers; the
    /// call fails `address_refused` only when none was reached and one was refused.
    public func postJSON(
        _ url: String, body: String, headers: [String], userAgent: String, connectTimeoutSeconds: Double,
        allowPrivateAddress: Bool
    ) throws(HTTPSFetchError) -> HTTPSResponse {
        try postJSON(
            url, body: body, headers: headers, userAgent: userAgent, connectTimeoutSeconds: connectTimeoutSeconds,
            addressGuard: AddressGuard(allowPrivate: allowPrivateAddress), on: nil)
    }

    /// A JSON API call: GETs `url` (`body` nil) or POSTs the JSON `body`, with `Accept:
    /// application/json` and `Authorization: Bearer` when `bearerToken` is given, and returns
    /// the response whatever its status: the caller decides what a status means (Google's RISC
    /// management API). The address is not checked: the URL is an operator's setting, not a
    /// destination a stranger chose. Neither the body nor the token is ever part of an error.
    public func exchangeJSON(_ url: String, body: String?, bearerToken: String?) throws(HTTPSFetchError)
        -> HTTPSResponse
    {
        let extras = RequestExtras(
            headers: ["Accept: application/json"] + (body == nil ? [] : ["Content-Type: application/json", "Expect:"]),
            userAgent: "siwa-endpoint", connectTimeoutSeconds: timeoutSeconds,
            addressGuard: AddressGuard(allowPrivate: true))
        return try perform(url, postBody: body, bearerToken: bearerToken, extras: extras)
    }

    /// `postJSON` on `kept`'s handle (its connection reused when libcurl can), or on a handle of
    /// its own when nil. The address check is handed to the handle on every call, so each new
    /// connection of a kept handle is checked as a first one is.
    func postJSON(
        _ url: String, body: String, headers: [String], userAgent: String, connectTimeoutSeconds: Double,
        addressGuard: AddressGuard, on kept: KeptHandle? = nil
    ) throws(HTTPSFetchError) -> HTTPSResponse {
        let extras = RequestExtras(
            headers: ["Content-Type: application/json", "Expect:"] + headers, userAgent: userAgent,
            connectTimeoutSeconds: connectTimeoutSeconds, addressGuard: addressGuard, kept: kept)
        return try perform(url, postBody: body, extras: extras)
    }

    /// Percent-encodes everything but RFC 3986's unreserved characters.
    static func formEncode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".unicodeScalars)
                out.unicodeScalars.append("%")
                out.unicodeScalars.append(hex[Int(byte >> 4)])
                out.unicodeScalars.append(hex[Int(byte & 0x0F)])
            }
        }
        return out
    }

    /// One transfer: a GET, or a POST of `postBody` (already encoded, no NUL bytes).
    private func perform(
        _ url: String, postBody: String?, bearerToken: String? = nil, extras: RequestExtras? = nil
    ) throws(HTTPSFetchError) -> HTTPSResponse {
        guard Self.globalInit == CURLE_OK else {
            throw HTTPSFetchError(.clientUnavailable, "libcurl global initialisation failed")
        }
        let kept = extras?.kept
        let target: ParsedURL
        if let kept { target = try kept.parsedURL(url) } else { target = try ParsedURL(url) }
        // A kept handle that cannot be made fails the call: a handle of its own in its place
        // would never be cleaned up (its connection left open) nor have its pointers taken back.
        guard let handle = kept != nil ? kept?.handle() : curl_easy_init() else {
            throw HTTPSFetchError(.clientUnavailable, "libcurl could not create a handle")
        }
        // A kept handle outlives this call: its owner cleans it up.
        defer { if kept == nil { curl_easy_cleanup(handle) } }

        let sink = ResponseSink(limit: maximumBytes)
        let sinkPointer = Unmanaged.passUnretained(sink).toOpaque()
        let guardPointer = extras.map { Unmanaged.passUnretained($0.addressGuard).toOpaque() }
        var headerList: UnsafeMutablePointer<curl_slist>?
        for header in extras?.headers ?? [] { headerList = curl_slist_append(headerList, header) }
        defer { curl_slist_free_all(headerList) }
        var retryAfter: String?
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)

        let (result, status): (CURLcode, Int) = withExtendedLifetime((sink, extras)) {
            errorBuffer.withUnsafeMutableBufferPointer { errorPointer in
                var setup = siwa_curl_setopt_curlu(handle, target.handle)
                func set(_ code: CURLcode) { if setup == CURLE_OK { setup = code } }
                // Only the scheme already checked may be spoken.
                set(siwa_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, target.scheme))
                set(siwa_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0))
                set(siwa_curl_setopt_long(handle, CURLOPT_MAXREDIRS, 0))
                set(siwa_curl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1))
                set(siwa_curl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2))
                set(siwa_curl_setopt_long(handle, CURLOPT_SSLVERSION, Int(CURL_SSLVERSION_TLSv1_2)))
                if let caFilePath { set(siwa_curl_setopt_string(handle, CURLOPT_CAINFO, caFilePath)) }
                // An environment variable must not route the key fetch through a proxy.
                set(siwa_curl_setopt_string(handle, CURLOPT_PROXY, ""))
                // Timeouts with signals are unsafe in a threaded process.
                set(siwa_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
                let timeoutMilliseconds = max(1, Int(timeoutSeconds * 1000))
                set(siwa_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, timeoutMilliseconds))
                set(
                    siwa_curl_setopt_long(
                        handle, CURLOPT_CONNECTTIMEOUT_MS,
                        extras.map { max(1, Int($0.connectTimeoutSeconds * 1000)) } ?? timeoutMilliseconds))
                // Refuses a declared length early; the sink caps chunked bodies.
                set(siwa_curl_setopt_off_t(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(maximumBytes)))
                set(siwa_curl_setopt_string(handle, CURLOPT_USERAGENT, "siwa-endpoint"))
                set(siwa_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorPointer.baseAddress))
                set(siwa_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, sinkPointer))
                set(siwa_curl_setopt_write_function(handle, responseSinkWrite))
                if let postBody {
                    // The size first: COPYPOSTFIELDS then copies exactly that many bytes.
                    set(siwa_curl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, postBody.utf8.count))
                    set(siwa_curl_setopt_string(handle, CURLOPT_COPYPOSTFIELDS, postBody))
                }
                if let bearerToken {
                    // `Authorization: Bearer <token>` (Apple's user migration endpoint).
                    set(siwa_curl_setopt_long(handle, CURLOPT_HTTPAUTH, Int(siwa_curl_auth_bearer)))
                    set(siwa_curl_setopt_string(handle, CURLOPT_XOAUTH2_BEARER, bearerToken))
                }
                if let extras {
                    set(siwa_curl_setopt_string(handle, CURLOPT_USERAGENT, extras.userAgent))
                    set(siwa_curl_setopt_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList)))
                    set(siwa_curl_setopt_pointer(handle, CURLOPT_OPENSOCKETDATA, guardPointer))
                    set(siwa_curl_setopt_opensocket_function(handle, openGuardedSocket))
                }
                guard setup == CURLE_OK else {
                    kept?.forgetCallState()
                    return (setup, 0)
                }
                let result = curl_easy_perform(handle)
                // Read on every answer: a webhook receiver's and Apple's 429 both carry it.
                if let value = siwa_curl_response_header(handle, "Retry-After") {
                    retryAfter = String(cString: value)
                }
                let status = siwa_curl_response_code(handle)
                kept?.forgetCallState()
                return (result, status)
            }
        }
        let detail = String(decoding: errorBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // A refused address explains a transfer that failed; when another address of the
        // name was reached, the request was sent and its answer is the outcome.
        if result != CURLE_OK, let refused = extras?.addressGuard.refusedAddress {
            throw HTTPSFetchError(.addressRefused, "the host resolved to \(refused), a private or special address")
        }
        guard result == CURLE_OK else { throw Self.error(for: result, detail: detail, sink: sink) }
        return HTTPSResponse(status: status, body: sink.bytes, retryAfter: retryAfter)
    }

    private static func error(for code: CURLcode, detail: String, sink: ResponseSink) -> HTTPSFetchError {
        let reason = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
        if sink.overflowed || code == CURLE_FILESIZE_EXCEEDED {
            return HTTPSFetchError(
                .responseTooLarge, "the response is larger than \(sink.limit) bytes", curlCode: code.rawValue)
        }
        let kind: HTTPSFetchError.Code
        switch code {
        case CURLE_UNSUPPORTED_PROTOCOL: kind = .schemeNotAllowed
        case CURLE_URL_MALFORMAT: kind = .urlInvalid
        case CURLE_COULDNT_RESOLVE_HOST: kind = .resolveFailed
        case CURLE_COULDNT_CONNECT: kind = .connectFailed
        case CURLE_OPERATION_TIMEDOUT: kind = .timedOut
        case CURLE_SSL_CONNECT_ERROR: kind = .tlsHandshakeFailed
        case CURLE_PEER_FAILED_VERIFICATION: kind = .tlsVerificationFailed
        case CURLE_SSL_CACERT_BADFILE: kind = .caFileUnusable
        default: kind = .transferFailed
        }
        return HTTPSFetchError(kind, reason, curlCode: code.rawValue)
    }

    /// Whether `host` (as libcurl normalises it) is a loopback address or name.
    ///
    /// Strict on purpose: an unusual spelling of a loopback address is refused,
    /// never guessed to be local.
    public static func isLoopbackHost(_ host: String) -> Bool {
        let lowered = host.lowercased()
        if lowered == "localhost" { return true }
        if lowered == "[::1]" || lowered == "::1" { return true }
        let parts = lowered.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return false }
        let octets = parts.compactMap { part -> Int? in
            guard !part.isEmpty, part.count <= 3, part.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return Int(part).flatMap { $0 <= 255 ? $0 : nil }
        }
        return octets.count == 4 && octets[0] == 127
    }
}

/// A URL parsed by libcurl itself, so the scheme and host checked are the ones fetched.
final class ParsedURL {
    let handle: OpaquePointer
    let scheme: String
    let host: String

    init(_ url: String) throws(HTTPSFetchError) {
        guard let handle = curl_url() else {
            throw HTTPSFetchError(.clientUnavailable, "libcurl could not create a URL handle")
        }
        // Any scheme parses, so that a wrong one is named as such, not as a bad URL.
        guard curl_url_set(handle, CURLUPART_URL, url, UInt32(CURLU_NON_SUPPORT_SCHEME)) == CURLUE_OK,
            let scheme = Self.part(handle, CURLUPART_SCHEME)?.lowercased()
        else {
            curl_url_cleanup(handle)
            throw HTTPSFetchError(.urlInvalid, "the URL does not parse")
        }
        guard scheme == "https" || scheme == "http" else {
            curl_url_cleanup(handle)
            throw HTTPSFetchError(.schemeNotAllowed, "only https is allowed, not \(scheme)")
        }
        guard let host = Self.part(handle, CURLUPART_HOST), !host.isEmpty else {
            curl_url_cleanup(handle)
            throw HTTPSFetchError(.urlInvalid, "the URL has no host")
        }
        guard scheme == "https" || HTTPSFetcher.isLoopbackHost(host) else {
            curl_url_cleanup(handle)
            throw HTTPSFetchError(.schemeNotAllowed, "plain http is allowed only to a loopback host")
        }
        self.handle = handle
        self.scheme = scheme
        self.host = host
    }

    deinit { curl_url_cleanup(handle) }

    private static func part(_ handle: OpaquePointer, _ part: CURLUPart) -> String? {
        var value: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, part, &value, 0) == CURLUE_OK, let value else { return nil }
        defer { curl_free(value) }
        return String(cString: value)
    }
}

/// A response of any status, with its body (capped at the fetcher's maximum).
public struct HTTPSResponse: Sendable, Equatable {
    public let status: Int
    public let body: [UInt8]
    /// The `Retry-After` header as the server wrote it (`RetryAfter` reads it), or nil.
    public let retryAfter: String?

    public init(status: Int, body: [UInt8], retryAfter: String? = nil) {
        self.status = status
        self.body = body
        self.retryAfter = retryAfter
    }
}

/// Collects the body up to a limit; a chunked response has no length to check first.
private final class ResponseSink {
    let limit: Int
    var bytes: [UInt8] = []
    var overflowed = false

    init(limit: Int) { self.limit = limit }
}

/// libcurl's write callback: returning less than it was given aborts the transfer.
private func responseSinkWrite(
    _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    guard let context else { return 0 }
    let sink = Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue()
    let length = size * count
    guard sink.bytes.count + length <= sink.limit else {
        sink.overflowed = true
        return 0
    }
    if let buffer, length > 0 {
        sink.bytes.append(contentsOf: UnsafeRawBufferPointer(start: buffer, count: length))
    }
    return length
}

/// What a webhook post adds to a transfer: its headers, its connect bound, its address check.
final class RequestExtras {
    let headers: [String]
    let userAgent: String
    let connectTimeoutSeconds: Double
    let addressGuard: AddressGuard
    /// The handle to post on, kept across calls; nil: a handle of this call's own.
    let kept: KeptHandle?

    init(
        headers: [String], userAgent: String, connectTimeoutSeconds: Double, addressGuard: AddressGuard,
        kept: KeptHandle? = nil
    ) {
        self.headers = headers
        self.userAgent = userAgent
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.addressGuard = addressGuard
        self.kept = kept
    }
}

/// Decides, for each address libcurl is about to connect to, whether it may; remembers a refusal.
final class AddressGuard {
    typealias Judge = (_ family: Int32, _ sockaddr: UnsafeBufferPointer<UInt8>) -> String?

    let allowPrivate: Bool
    /// The address in text when it must not be reached (`PrivateAddress`; tests give another).
    let judge: Judge
    var refusedAddress: String?

    init(allowPrivate: Bool, judge: @escaping Judge = PrivateAddress.describeIfSpecial(family:sockaddr:)) {
        self.allowPrivate = allowPrivate
        self.judge = judge
    }
}

/// libcurl's open-socket callback: refuses (CURL_SOCKET_BAD, so libcurl never connects) an
/// address `PrivateAddress` names, unless the destination allows it; otherwise opens the
/// socket libcurl asked for.
private func openGuardedSocket(
    _ context: UnsafeMutableRawPointer?, _ purpose: curlsocktype, _ address: UnsafeMutablePointer<curl_sockaddr>?
) -> curl_socket_t {
    guard let context, let address else { return CURL_SOCKET_BAD }
    let addressGuard = Unmanaged<AddressGuard>.fromOpaque(context).takeUnretainedValue()
    let family = address.pointee.family
    let length = Int(address.pointee.addrlen)
    let special: String? = UnsafeMutableRawPointer(address.pointer(to: \.addr)!).withMemoryRebound(
        to: UInt8.self, capacity: length
    ) { bytes in
        addressGuard.judge(family, UnsafeBufferPointer(start: bytes, count: length))
    }
    if let special, !addressGuard.allowPrivate {
        addressGuard.refusedAddress = special
        return CURL_SOCKET_BAD
    }
    return socket(family, address.pointee.socktype, address.pointee.protocol)
}
