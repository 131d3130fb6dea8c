import SIWAHTTPS

/// Revokes one user's refresh or access token at Apple's `/auth/revoke`, with the same
/// client secret, fetcher, pacing and retry rules as `AppleSignedPost` (whose settings it
/// shares).
///
/// `200`: revoked (Apple answers 200 for a token that was never valid too, so it proves
/// the call, not that a live token ended). `400 invalid_client` or `unauthorized_client`:
/// our configuration is wrong, never a user's state. Another `400` with an error code:
/// refused with that code (`invalid_request`, `unsupported_token_type`, ...). `5xx`, a
/// timeout or a failed connection: retried, then unknown; a `429` after Apple's
/// `Retry-After` (see `AppleSignedPost`). Nothing here logs;
/// nothing returned holds the token or the secret.
public struct AppleTokenRevocation: Sendable {
    public static let defaultRevokeURL = "https://appleid.apple.com/auth/revoke"

    public enum TokenKind: String, Sendable {
        case refreshToken = "refresh_token"
        case accessToken = "access_token"
    }

    public enum Verdict: Sendable, Equatable {
        case revoked
        /// Apple refused this request; `code` is Apple's error code.
        case refused(code: String)
        /// Apple refused the client itself: stop the run.
        case configurationError(code: String)
        /// No decision after every attempt; `reason` is a short code (`http_503`, `timed_out`, ...).
        case unknown(reason: String)
    }

    public let revokeURL: String
    /// The client secret, fetcher, attempts, delays and pacing.
    public let client: AppleSignedPost

    public init(revokeURL: String, client: AppleSignedPost) {
        self.revokeURL = revokeURL
        self.client = client
    }

    public func revoke(clientID: String, token: String, kind: TokenKind) -> Verdict {
        client.retrying { attemptOnce(clientID: clientID, token: token, kind: kind) }
    }

    private func attemptOnce(clientID: String, token: String, kind: TokenKind) -> (
        Verdict, retry: AppleSignedPost.Retry
    ) {
        let response: HTTPSResponse
        switch client.postSigned(
            revokeURL, clientID: clientID,
            form: { clientSecret in
                [
                    ("client_id", clientID), ("client_secret", clientSecret), ("token", token),
                    ("token_type_hint", kind.rawValue),
                ]
            })
        {
        case .answered(let answer): response = answer
        case .secretFailed: return (.configurationError(code: "client_secret_signing_failed"), .final)
        case .unreachable(let code): return (.unknown(reason: code), .later)
        }
        switch response.status {
        case 200:
            return (.revoked, .final)
        case 400, 401:
            switch AppleSignedPost.errorCode(response.body) {
            case let code? where code == "invalid_client" || code == "unauthorized_client":
                return (.configurationError(code: code), .final)
            case let code?:
                return (.refused(code: code), .final)
            case nil:
                return (.unknown(reason: "http_\(response.status)_no_error_code"), .final)
            }
        case 429:
            return (.unknown(reason: "http_429"), .throttled)
        case 500...599:
            return (.unknown(reason: "http_\(response.status)"), .later)
        default:
            return (.unknown(reason: "http_\(response.status)"), .final)
        }
    }
}
