import Foundation
import SIWAHTTPS

/// One Standard Webhooks call to a destination, and what its outcome means. Calls go over one
/// connection kept open between them (unless the destination sets `keep_connection` false):
/// copies of a poster share it.
public struct WebhookPoster: Sendable {
    /// The response body read at most (then discarded): a larger one is `response_too_large`.
    public static let maximumResponseBytes = 4096

    public let destination: WebhookDestination
    public let connectTimeout: Duration
    public let timeout: Duration
    public let userAgent: String
    /// The destination's connection, kept between calls (`HTTPSPostSession`).
    public let session: HTTPSPostSession

    /// `keptConnectionIdle`: how long the kept connection may sit unused (`SIWA_WEBHOOK_KEEPALIVE_MS`).
    public init(
        destination: WebhookDestination, connectTimeout: Duration, timeout: Duration, userAgent: String,
        keptConnectionIdle: Duration = HTTPSPostSession.defaultIdleLimit
    ) {
        self.destination = destination
        self.connectTimeout = connectTimeout
        self.timeout = timeout
        self.userAgent = userAgent
        session = HTTPSPostSession(
            fetcher: HTTPSFetcher(
                caFilePath: destination.caFile, timeoutSeconds: Self.seconds(timeout),
                maximumBytes: Self.maximumResponseBytes),
            allowPrivateAddress: destination.allowPrivateAddress, keepConnection: destination.keepConnection,
            idleLimit: keptConnectionIdle)
    }

    /// Closes the kept connection if it has been unused for its idle bound.
    public func closeIdleConnection() { session.closeIfIdle() }

    /// Closes the kept connection (the deliverer stopping).
    public func closeConnection() { session.close() }

    /// What one attempt came to.
    public enum Outcome: Sendable, Equatable {
        case delivered(status: Int)
        /// `cause` is one of `WebhookMetrics.causes`; `retryAfterSeconds` from a slow-down answer.
        case failed(cause: String, status: Int?, retryAfterSeconds: Double?)

        public var cause: String? {
            if case .failed(let cause, _, _) = self { return cause }
            return nil
        }
    }

    /// Signs `message` at `timestamp` (Unix seconds) with every key and posts it.
    public func post(_ message: WebhookMessage, timestamp: Int64, now: Date = Date()) -> Outcome {
        let signature: String
        do {
            signature = try message.signatureHeader(timestamp: timestamp, keys: destination.keys)
        } catch {
            return .failed(cause: "client_error", status: nil, retryAfterSeconds: nil)
        }
        let response: HTTPSResponse
        do {
            response = try session.postJSON(
                destination.url, body: String(decoding: message.body, as: UTF8.self),
                headers: [
                    "webhook-id: \(message.id)", "webhook-timestamp: \(timestamp)", "webhook-signature: \(signature)",
                ], userAgent: userAgent, connectTimeoutSeconds: Self.seconds(connectTimeout))
        } catch {
            return .failed(cause: Self.cause(of: error), status: nil, retryAfterSeconds: nil)
        }
        return Self.outcome(status: response.status, retryAfter: response.retryAfter, now: now)
    }

    /// The meaning of an answer: 2xx delivered; 3xx `redirect` (never followed); 410 `gone`;
    /// 429, 502, 503, 504 `slow_down` (with `Retry-After`, seconds or an HTTP date); any
    /// other 4xx `client_error`; any other status `server_error`.
    public static func outcome(status: Int, retryAfter: String?, now: Date) -> Outcome {
        switch status {
        case 200...299: return .delivered(status: status)
        case 300...399: return .failed(cause: "redirect", status: status, retryAfterSeconds: nil)
        case 410: return .failed(cause: "gone", status: status, retryAfterSeconds: nil)
        case 429, 502, 503, 504:
            return .failed(
                cause: "slow_down", status: status,
                retryAfterSeconds: retryAfter.flatMap { retryAfterSeconds($0, now: now) })
        case 400...499: return .failed(cause: "client_error", status: status, retryAfterSeconds: nil)
        default: return .failed(cause: "server_error", status: status, retryAfterSeconds: nil)
        }
    }

    /// `Retry-After`: delta seconds, or an HTTP date (RFC 9110 IMF-fixdate); nil when neither.
    /// One reading of the header for every caller: `RetryAfter` (the requests to Apple use it too).
    public static func retryAfterSeconds(_ text: String, now: Date) -> Double? {
        RetryAfter.seconds(text, nowSeconds: Int64(now.timeIntervalSince1970.rounded(.down))).map(Double.init)
    }

    static func cause(of error: HTTPSFetchError) -> String {
        switch error.code {
        case .timedOut: return "timeout"
        case .addressRefused: return "refused_address"
        case .tlsHandshakeFailed, .tlsVerificationFailed, .caFileUnusable: return "tls"
        case .responseTooLarge: return "response_too_large"
        default: return "connect"
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
