import Foundation
import SIWAHTTPS
import SIWAJSON
import SIWAVerification

/// A POST to Apple's REST API signed with the client secret (`postSigned`), paced and
/// retried (`retrying`): revocation (`AppleTokenRevocation`) and user migration
/// (`AppleUserMigration`) go through it. Its own call, `check`, asks Apple's token endpoint
/// whether it still honours one refresh token.
///
/// `200`: still valid. `400 invalid_grant`: refused. `400 invalid_client` or
/// `unauthorized_client`: our configuration is wrong (key, key ID, team ID, client
/// ID), never a user's state. `5xx`, a timeout or a failed connection: retried with a
/// doubling delay (a `503`'s `Retry-After` waited for too), then unknown. `429`: Apple asks the run to slow down: the pacer holds
/// every request back for the answer's `Retry-After` (the retry delay when it has none)
/// and halves the pace, and the same request is asked again; a `429` does not use up an
/// attempt, but `throttledAttempts` of them in a row end the request unknown (`http_429`).
/// Any other `4xx`: unknown at once (a retry cannot change it). Nothing here logs;
/// nothing returned holds the token or the secret.
public struct AppleSignedPost: Sendable {
    public enum Verdict: Sendable, Equatable {
        case valid
        case refused
        /// Apple refused the client itself: stop the run. `code` is Apple's error code.
        case configurationError(code: String)
        /// No decision after every attempt; `reason` is a short code (`http_503`, `timed_out`, ...).
        case unknown(reason: String)
    }

    /// Three tries per call on a 5xx or a timeout, and the bounds the settings accept.
    public static let defaultAttempts = 3
    public static let attemptsRange = 1...10
    /// Two seconds before the first retry (doubled for each next one), and the bounds.
    public static let defaultRetryDelayMilliseconds = 2000
    public static let retryDelayMillisecondsRange = 10...60_000
    /// The whole timeout of one request to Apple, and the bounds.
    public static let defaultTimeoutSeconds = 10
    public static let timeoutSecondsRange = 1...60
    /// `429`s in a row that one request may meet (each after Apple's wait) before it is unknown.
    public static let throttledAttempts = 10

    /// Whether an attempt's answer is final, worth another attempt after the retry delay, or
    /// a `429` (the pacer already holds the next request back).
    typealias Retry = RequestRetries.Decision

    public let tokenURL: String
    public let secret: AppleClientSecret
    public let fetcher: HTTPSFetcher
    public let attempts: Int
    public let retryDelayMilliseconds: Int
    /// Waited on before every request (the first and each retry), told of each `429`.
    public let pacer: RequestPacer
    public let nowSeconds: @Sendable () -> Int64

    public init(
        tokenURL: String, secret: AppleClientSecret, fetcher: HTTPSFetcher, attempts: Int, retryDelayMilliseconds: Int,
        pacer: RequestPacer = RequestPacer(interval: .zero),
        nowSeconds: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.tokenURL = tokenURL
        self.secret = secret
        self.fetcher = fetcher
        self.attempts = max(1, attempts)
        self.retryDelayMilliseconds = retryDelayMilliseconds
        self.pacer = pacer
        self.nowSeconds = nowSeconds
    }

    /// Checks `refreshToken` of `clientID`, retrying what may pass later.
    public func check(clientID: String, refreshToken: String) -> Verdict {
        retrying { attemptOnce(clientID: clientID, refreshToken: refreshToken) }
    }

    /// Runs `attempt` until its answer is final or `attempts` are spent, waiting
    /// `retryDelayMilliseconds` before the first retry and twice as long before each next
    /// (at most a minute). A `429` is asked again once the pacer lets it (Apple's wait),
    /// without using up an attempt, up to `throttledAttempts` in a row. Shared by every call
    /// to Apple's token endpoints (the loop itself is `RequestRetries`, Google's too).
    func retrying<Answer>(_ attempt: () -> (Answer, retry: Retry)) -> Answer {
        RequestRetries(
            attempts: attempts, retryDelayMilliseconds: retryDelayMilliseconds,
            throttledAttempts: Self.throttledAttempts
        ).run(attempt)
    }

    /// How one signed request to Apple ended before its status was read.
    enum SignedRequest {
        case answered(HTTPSResponse)
        /// The client secret could not be signed (the key): a configuration error.
        case secretFailed
        /// No answer: the fetcher's error code (`timed_out`, `connect_failed`, ...), worth a retry.
        case unreachable(String)
    }

    /// The one way every call to Apple is made: the pacer's wait, a fresh client secret for
    /// `clientID`, then a POST of the form `form` builds around that secret (with
    /// `bearerToken` when given). A `429` tells the pacer (its `Retry-After`, or the retry
    /// delay), and so does a `503` that has a `Retry-After`, before the caller reads the status.
    func postSigned(
        _ url: String, clientID: String, bearerToken: String? = nil,
        form: (_ clientSecret: String) -> [(String, String)]
    ) -> SignedRequest {
        // The wait first: a Retry-After can outlast the secret's five minutes.
        pacer.wait()
        let clientSecret: String
        do {
            clientSecret = try secret.make(clientID: clientID, issuedAt: nowSeconds())
        } catch {
            return .secretFailed
        }
        let response: HTTPSResponse
        do {
            response = try fetcher.post(
                url, form: form(clientSecret).map { (name: $0.0, value: $0.1) }, bearerToken: bearerToken)
        } catch {
            return .unreachable(error.code.rawValue)
        }
        pacer.heed(response, nowSeconds: nowSeconds(), fallbackHold: .milliseconds(retryDelayMilliseconds))
        return .answered(response)
    }

    private func attemptOnce(clientID: String, refreshToken: String) -> (Verdict, retry: Retry) {
        let response: HTTPSResponse
        switch postSigned(
            tokenURL, clientID: clientID,
            form: { clientSecret in
                [
                    ("client_id", clientID), ("client_secret", clientSecret), ("grant_type", "refresh_token"),
                    ("refresh_token", refreshToken),
                ]
            })
        {
        case .answered(let answer): response = answer
        case .secretFailed: return (.configurationError(code: "client_secret_signing_failed"), .final)
        case .unreachable(let code): return (.unknown(reason: code), .later)
        }
        switch response.status {
        case 200:
            return (.valid, .final)
        case 400, 401:
            let code = Self.errorCode(response.body)
            switch code {
            case "invalid_grant": return (.refused, .final)
            case "invalid_client", "unauthorized_client": return (.configurationError(code: code ?? ""), .final)
            default: return (.unknown(reason: "http_\(response.status)_\(code ?? "no_error_code")"), .final)
            }
        case 429:
            return (.unknown(reason: "http_429"), .throttled)
        case 500...599:
            return (.unknown(reason: "http_\(response.status)"), .later)
        default:
            return (.unknown(reason: "http_\(response.status)"), .final)
        }
    }

    /// The `error` member of an OAuth error body, when it is a short plain code.
    static func errorCode(_ body: [UInt8]) -> String? {
        guard case .object(let members) = try? StrictJSONParser.parse(body), case .string(let code)? = members["error"],
            !code.isEmpty, code.count <= 64, code.allSatisfy({ $0.isASCII && ($0.isLetter || $0 == "_") })
        else { return nil }
        return code
    }
}
