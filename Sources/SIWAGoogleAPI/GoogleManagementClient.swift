import Foundation
import SIWAHTTPS
import SIWAJSON

/// Google's RISC management API (`{api}/v1beta/stream...`): what `siwa-endpoint google` asks of
/// it, each call authorised with a freshly signed JWT (`GoogleManagementAuthorization`).
///
/// Every call goes through `RequestRetries` and the `RequestPacer`, as the calls to Apple do: a
/// `5xx` or no answer is retried (`attempts`, the delay doubling), a `429` (and a `503` that
/// says so) waits its `Retry-After` before the next try. A wait longer than `longestWait` is
/// not waited out by a command someone is watching: it ends the call at once
/// (`google_throttled`, with the seconds Google asked for). Nothing here logs.
public struct GoogleManagementClient: Sendable {
    public static let defaultAPIURL = "https://risc.googleapis.com"
    public static let defaultTimeoutSeconds = 10.0
    public static let defaultAttempts = 3
    public static let defaultRetryDelayMilliseconds = 1000
    /// `429`s in a row before the call gives up.
    public static let throttledAttempts = 3
    public static let defaultLongestWait: Duration = .seconds(60)

    public let apiURL: String
    public let authorization: GoogleManagementAuthorization
    public let fetcher: HTTPSFetcher
    public let retries: RequestRetries
    public let pacer: RequestPacer
    public let longestWait: Duration
    public let nowSeconds: @Sendable () -> Int64

    public init(
        apiURL: String, authorization: GoogleManagementAuthorization, caFile: String? = nil,
        timeoutSeconds: Double = defaultTimeoutSeconds, attempts: Int = defaultAttempts,
        retryDelayMilliseconds: Int = defaultRetryDelayMilliseconds, longestWait: Duration = defaultLongestWait,
        nowSeconds: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) },
        onWait: @escaping @Sendable (Duration) -> Void = { _ in }
    ) {
        // `https://risc.googleapis.com/` and `https://risc.googleapis.com` name the same API.
        var trimmed = apiURL
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        self.apiURL = trimmed
        self.authorization = authorization
        fetcher = HTTPSFetcher(caFilePath: caFile, timeoutSeconds: timeoutSeconds)
        retries = RequestRetries(
            attempts: attempts, retryDelayMilliseconds: retryDelayMilliseconds,
            throttledAttempts: Self.throttledAttempts)
        // Told each wait Google asks for, so the command can say why it pauses.
        pacer = RequestPacer(interval: .zero, onHold: onWait)
        self.longestWait = longestWait
        self.nowSeconds = nowSeconds
    }

    /// `POST /v1beta/stream:update`: Google pushes `eventTypes` (URIs) to `receiverURL`.
    public func updateStream(receiverURL: String, eventTypes: [String]) throws(GoogleManagementError) {
        let body = JSONWriter.object([
            (
                "delivery",
                .object([
                    "delivery_method": .string(GoogleManagementEvents.pushDeliveryMethod),
                    "url": .string(receiverURL),
                ])
            ),
            ("events_requested", .array(eventTypes.map { .string($0) })),
        ])
        _ = try call("/v1beta/stream:update", body: body)
    }

    /// `GET /v1beta/stream`: the stream configuration Google holds, as it sent it.
    public func stream() throws(GoogleManagementError) -> [String: JSONValue] {
        let answer = try call("/v1beta/stream", body: nil)
        guard case .object(let members)? = try? StrictJSONParser.parse(answer) else {
            throw GoogleManagementError(
                .unexpectedAnswer, "Google answered 200 to GET /v1beta/stream with a body that is not a JSON object",
                httpStatus: 200)
        }
        return members
    }

    /// `POST /v1beta/stream/status:update`: `enabled`, or `disabled` (Google then sends nothing
    /// and keeps nothing for later).
    public func updateStatus(enabled: Bool) throws(GoogleManagementError) {
        _ = try call(
            "/v1beta/stream/status:update",
            body: JSONWriter.object([("status", .string(enabled ? "enabled" : "disabled"))]))
    }

    /// `POST /v1beta/stream:verify`: Google pushes a `verification` SET carrying `state` (when
    /// the stream asks for that type).
    public func verify(state: String) throws(GoogleManagementError) {
        _ = try call("/v1beta/stream:verify", body: JSONWriter.object([("state", .string(state))]))
    }

    /// One call, retried as the type says: the body of its 200, or the error that ended it.
    private func call(_ path: String, body: String?) throws(GoogleManagementError) -> [UInt8] {
        let outcome: Result<[UInt8], GoogleManagementError> = retries.run { attempt(path, body: body) }
        return try outcome.get()
    }

    private func attempt(_ path: String, body: String?) -> (
        Result<[UInt8], GoogleManagementError>, retry: RequestRetries.Decision
    ) {
        // The wait first, then the token: its `iat` is the time it is sent, however long Google
        // asked to wait.
        pacer.wait()
        let token: String
        do {
            token = try authorization.token(issuedAt: nowSeconds())
        } catch {
            return (
                .failure(
                    GoogleManagementError(
                        .signingFailed,
                        "signing the authorisation JWT with the service account key failed: \(error.message)")),
                .final
            )
        }
        let method = body == nil ? "GET" : "POST"
        let response: HTTPSResponse
        do {
            response = try fetcher.exchangeJSON(apiURL + path, body: body, bearerToken: token)
        } catch {
            return (
                .failure(
                    GoogleManagementError(
                        .unreachable,
                        "\(method) \(path): no answer from \(apiURL) (\(error.code.rawValue): \(error.message)); "
                            + "check the outbound HTTPS route, SIWA_GOOGLE_RISC_API_URL and SIWA_GOOGLE_CA_FILE")),
                .later
            )
        }
        let asked = response.retryAfter.flatMap { RetryAfter.seconds($0, nowSeconds: nowSeconds()) }
        let said = Self.googleMessage(response.body).map { ": Google says \"\($0)\"" } ?? ""
        switch response.status {
        case 200...299:
            return (.success(response.body), .final)
        case let status where (status == 429 || status == 503) && asked.map({ .seconds($0) > longestWait }) == true:
            return (
                .failure(
                    GoogleManagementError(
                        response.status == 429 ? .throttled : .unavailable,
                        "\(method) \(path): Google answered \(response.status) and asks to wait \(asked ?? 0) s, "
                            + "longer than this command waits; run it again after that\(said)",
                        httpStatus: response.status, retryAfterSeconds: asked)),
                .final
            )
        case 429:
            pacer.heed(response, nowSeconds: nowSeconds(), fallbackHold: retries.retryDelay)
            return (
                .failure(
                    GoogleManagementError(
                        .throttled,
                        "\(method) \(path): Google answered 429 (too many requests) \(Self.throttledAttempts) times "
                            + "in a row, each waited out; run it again later\(said)",
                        httpStatus: 429, retryAfterSeconds: asked)),
                .throttled
            )
        case 500...599:
            pacer.heed(response, nowSeconds: nowSeconds(), fallbackHold: retries.retryDelay)
            return (
                .failure(
                    GoogleManagementError(
                        .unavailable,
                        "\(method) \(path): Google answered \(response.status) to every try; run it again later\(said)",
                        httpStatus: response.status, retryAfterSeconds: asked)),
                .later
            )
        case 400:
            return (
                .failure(
                    GoogleManagementError(
                        .badRequest,
                        "\(method) \(path): Google refused the request as malformed (400)\(said)", httpStatus: 400)),
                .final
            )
        case 401:
            return (
                .failure(
                    GoogleManagementError(
                        .unauthorized,
                        "\(method) \(path): Google refused the authorisation (401)\(said); check that the key of "
                            + "SIWA_GOOGLE_SERVICE_ACCOUNT_FILE is not deleted or disabled, and this host's clock",
                        httpStatus: 401)),
                .final
            )
        case 403:
            return (
                .failure(
                    GoogleManagementError(
                        .forbidden,
                        "\(method) \(path): Google refused (403)\(said); the causes Google names: the receiver URL "
                            + "is not HTTPS or not in a domain of the project, the service account lacks the RISC "
                            + "Configuration Admin role (roles/riscconfigs.admin), the RISC API is not enabled in "
                            + "the project, or the status is not one Google accepts",
                        httpStatus: 403)),
                .final
            )
        case 404:
            return (
                .failure(
                    GoogleManagementError(
                        .notConfigured,
                        "\(method) \(path): Google holds no stream configuration for this project (404); "
                            + "run `siwa-endpoint google register` first\(said)", httpStatus: 404)),
                .final
            )
        default:
            return (
                .failure(
                    GoogleManagementError(
                        .unexpectedAnswer, "\(method) \(path): Google answered HTTP \(response.status)\(said)",
                        httpStatus: response.status)),
                .final
            )
        }
    }

    /// Google's `error.message` (or an OAuth `error_description`), when it is short plain
    /// text: shown to the operator, since it names the cause (a 403's above all). Cut to 300
    /// characters, control characters dropped.
    static func googleMessage(_ body: [UInt8]) -> String? {
        guard case .object(let members)? = try? StrictJSONParser.parse(body) else { return nil }
        var text: String?
        if case .object(let error)? = members["error"], case .string(let message)? = error["message"] {
            text = message
        } else if case .string(let description)? = members["error_description"] {
            text = description
        }
        guard let text else { return nil }
        let shown = printable(text)
        guard !shown.isEmpty else { return nil }
        return shown.count > 300 ? String(shown.prefix(300)) + "..." : shown
    }

    /// `text` without control characters (C0, DEL, C1): what Google sent is printed to an
    /// operator's terminal, where an escape sequence must not act.
    public static func printable(_ text: String) -> String {
        String(
            String.UnicodeScalarView(
                text.unicodeScalars.filter { $0.value >= 0x20 && !(0x7F...0x9F).contains($0.value) }))
    }
}

extension RequestRetries {
    /// The first retry's delay, as the pacer's hold for a `429` that names none.
    var retryDelay: Duration { .milliseconds(retryDelayMilliseconds) }
}
