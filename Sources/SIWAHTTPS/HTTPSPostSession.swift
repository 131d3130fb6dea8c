import CCurl
import Glibc
import Synchronization

/// POSTs to one destination on one libcurl handle kept between calls, so the connection (TCP
/// and TLS) is reused while the receiver keeps it open (HTTP/1.1 keep-alive, or HTTP/2 when
/// the receiver offers it), instead of a new connection and a full TLS handshake for every POST.
///
/// - One connection at most (`CURLOPT_MAXCONNECTS` 1).
/// - Re-established after an error: a call that fails in transport (no answer, timeout, TLS, a
///   refused address) drops the handle and its connection; the next call starts afresh. A kept
///   connection the receiver has closed is noticed by libcurl and replaced by a new one; a POST
///   written on a kept connection that died before one byte came back is written once more on a
///   new connection within the same call (libcurl's rule for kept connections; the receiver
///   may see the `webhook-id` twice, as after any retry).
/// - Idle time bounded: `closeIfIdle` closes a connection unused for `idleLimit` (the deliverer
///   calls it on every turn); libcurl itself never reuses one idle that long
///   (`CURLOPT_MAXAGE_CONN`), and none serves longer than `maximumLifetime`, so a changed DNS
///   answer or a receiver's new instance is reached within minutes under steady traffic.
/// - Every new connection is checked as the first one was: the certificate and the host
///   verified with no TLS session resumption (a resumed session skips the certificate), and
///   the address checked by the open-socket callback (`HTTPSFetcher.postJSON`).
///
/// With `keepConnection` false, every POST has a handle and a connection of its own (what the
/// deliverer did before kept connections; `keep_connection: false` in the destinations file).
/// One call at a time holds the handle; the deliverer uses a session from one thread.
public final class HTTPSPostSession: Sendable {
    /// The default of `idleLimit`: long enough to carry a steady trickle of events, short enough
    /// not to hold a receiver's connection slot for nothing.
    public static let defaultIdleLimit: Duration = .seconds(30)
    /// How long a kept connection serves at most, however busy.
    public static let maximumLifetime: Duration = .seconds(300)

    public let fetcher: HTTPSFetcher
    public let keepConnection: Bool
    public let idleLimit: Duration
    private let state: Mutex<State>

    struct State {
        var kept: KeptHandle?
        var allowPrivateAddress: Bool
        var lastUse: ContinuousClock.Instant?
    }

    /// `allowPrivateAddress` is the destination's, fixed for the session: a connection opened
    /// under one policy is never reused under another.
    public init(
        fetcher: HTTPSFetcher, allowPrivateAddress: Bool, keepConnection: Bool = true,
        idleLimit: Duration = defaultIdleLimit
    ) {
        self.fetcher = fetcher
        self.keepConnection = keepConnection
        self.idleLimit = idleLimit
        state = Mutex(State(kept: nil, allowPrivateAddress: allowPrivateAddress, lastUse: nil))
    }

    deinit { close() }

    /// `HTTPSFetcher.postJSON` on the kept connection (or on a new one when there is none, or
    /// when connections are not kept).
    public func postJSON(
        _ url: String, body: String, headers: [String], userAgent: String, connectTimeoutSeconds: Double
    ) throws(HTTPSFetchError) -> HTTPSResponse {
        let fetcher = fetcher
        let keepConnection = keepConnection
        let idleLimit = idleLimit
        return try state.withLock { (state: inout State) throws(HTTPSFetchError) -> HTTPSResponse in
            if keepConnection, state.kept == nil { state.kept = KeptHandle(idleLimit: idleLimit) }
            defer { state.lastUse = .now }
            do throws(HTTPSFetchError) {
                return try fetcher.postJSON(
                    url, body: body, headers: headers, userAgent: userAgent,
                    connectTimeoutSeconds: connectTimeoutSeconds,
                    addressGuard: AddressGuard(allowPrivate: state.allowPrivateAddress),
                    on: state.kept)
            } catch {
                // Whatever state the connection was left in, the next call starts on a new one.
                state.kept?.close()
                state.kept = nil
                throw error
            }
        }
    }

    /// Closes the kept connection when it has been unused for `idleLimit` at `now`; true when it did.
    @discardableResult
    public func closeIfIdle(now: ContinuousClock.Instant = .now) -> Bool {
        let idleLimit = idleLimit
        return state.withLock { state in
            guard let kept = state.kept, let lastUse = state.lastUse, now - lastUse >= idleLimit else { return false }
            kept.close()
            state.kept = nil
            return true
        }
    }

    /// Closes the kept connection (TLS close_notify, then the socket), if there is one.
    public func close() {
        state.withLock { state in
            state.kept?.close()
            state.kept = nil
        }
    }

    /// Whether a handle (and so possibly a connection) is kept now.
    public var holdsConnection: Bool { state.withLock { $0.kept != nil } }

    /// The address policy for the connections opened from now on. Tests only: it stands for the
    /// destination's name resolving to another kind of address than before (the policy itself
    /// never changes in a deliverer).
    var allowPrivateAddress: Bool {
        get { state.withLock { $0.allowPrivateAddress } }
        set { state.withLock { $0.allowPrivateAddress = newValue } }
    }
}

/// A libcurl easy handle that lives across transfers, so libcurl's connection cache (one per
/// handle) keeps the connection open between them. Every libcurl pointer it holds lives here
/// and in `HTTPSFetcher`.
final class KeptHandle {
    let idleLimit: Duration
    /// `HTTPSPostSession.maximumLifetime`; another value only in tests.
    let lifetime: Duration
    private var curl: UnsafeMutableRawPointer?
    /// The URL the handle was last given (`CURLOPT_CURLU` keeps a pointer to it).
    private var target: (text: String, parsed: ParsedURL)?

    init(idleLimit: Duration, lifetime: Duration = HTTPSPostSession.maximumLifetime) {
        self.idleLimit = idleLimit
        self.lifetime = lifetime
    }

    deinit { close() }

    /// The handle, made on first use with the options that hold for its whole life; nil when
    /// libcurl cannot make one or refuses an option. A handle whose kept connection holds
    /// bytes no request asked for is replaced by a new one first (`holdsUnreadInput`).
    func handle() -> UnsafeMutableRawPointer? {
        if let curl {
            guard Self.holdsUnreadInput(curl) else { return curl }
            // Its connection goes with it; the URL stays, set again on the new handle.
            curl_easy_cleanup(curl)
            self.curl = nil
        }
        guard let made = curl_easy_init() else { return nil }
        let idleSeconds = Int(
            (Double(idleLimit.components.seconds) + Double(idleLimit.components.attoseconds) / 1e18)
                .rounded(.up))
        let options: [(CURLoption, Int)] = [
            (CURLOPT_MAXCONNECTS, 1),
            (CURLOPT_MAXAGE_CONN, max(1, idleSeconds)),
            (CURLOPT_MAXLIFETIME_CONN, Int(lifetime.components.seconds)),
            // A resumed TLS session skips the certificate: every new connection makes a full
            // handshake, so the certificate and host are verified per connection.
            (CURLOPT_SSL_SESSIONID_CACHE, 0),
        ]
        for (option, value) in options where siwa_curl_setopt_long(made, option, value) != CURLE_OK {
            curl_easy_cleanup(made)
            return nil
        }
        curl = made
        return made
    }

    /// Whether the HTTP/1.x connection `curl` keeps has something to read before any request
    /// is written on it: an answer no request asked for (a receiver that answered twice), or
    /// the receiver's close. Read as the next request's answer, a stray 200 would count a POST
    /// delivered that the receiver refused, and every answer after it would be the previous
    /// request's; libcurl 7.88 reuses such a connection (only its end is noticed). An HTTP/2
    /// connection is libcurl's to check: frames come between requests (PING, SETTINGS), and
    /// each answer names its stream.
    static func holdsUnreadInput(_ curl: UnsafeMutableRawPointer) -> Bool {
        let socket = siwa_curl_active_socket(curl)
        guard socket != CURL_SOCKET_BAD, siwa_curl_last_response_http1(curl) != 0 else { return false }
        var entry = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        // Readable, closed or failed: none of them a connection to write the next POST on.
        return poll(&entry, 1, 0) != 0
    }

    /// `url` parsed, the same object as the last call's when the text is the same.
    func parsedURL(_ url: String) throws(HTTPSFetchError) -> ParsedURL {
        if let target, target.text == url { return target.parsed }
        let parsed = try ParsedURL(url)
        target = (url, parsed)
        return parsed
    }

    /// Takes back from the handle the pointers into one call's buffers (error text, header
    /// list, body sink, address check), so nothing between calls can reach a freed one. A socket
    /// libcurl tried to open with no address check would be refused (CURL_SOCKET_BAD).
    func forgetCallState() {
        guard let curl else { return }
        _ = siwa_curl_setopt_pointer(curl, CURLOPT_ERRORBUFFER, nil)
        _ = siwa_curl_setopt_pointer(curl, CURLOPT_HTTPHEADER, nil)
        _ = siwa_curl_setopt_pointer(curl, CURLOPT_WRITEDATA, nil)
        _ = siwa_curl_setopt_pointer(curl, CURLOPT_OPENSOCKETDATA, nil)
    }

    /// Closes the connection and frees the handle; the URL after it, which the handle points to.
    func close() {
        if let curl { curl_easy_cleanup(curl) }
        curl = nil
        target = nil
    }
}
