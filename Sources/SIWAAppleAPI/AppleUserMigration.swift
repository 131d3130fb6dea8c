import Foundation
import SIWAHTTPS
import SIWAJSON
import SIWAVerification

/// Apple's user migration for an app transfer (TN3159), with the team's client secret and
/// the client, pacing and retry rules of `AppleSignedPost`.
///
/// An access token comes from `/auth/token` with `grant_type=client_credentials` and
/// `scope=user.migration`; it is reused until shortly before its `expires_in` (an hour) runs
/// out, then renewed. Each user is one `POST` to `/auth/usermigrationinfo` with
/// `Authorization: Bearer` and the form Apple defines: the sending team sends `sub` and
/// `target` and gets `transfer_sub`; the recipient sends `transfer_sub` and gets the new
/// `sub` (with `email` and `is_private_email` where the user has one).
///
/// `400 invalid_grant`: the token is no longer honoured: renewed once and the user asked
/// again; refused again, the run must stop (`tokenRefused`). `400 invalid_client` or
/// `unauthorized_client`: our configuration. Another `400` code: that user's refusal
/// (`invalid_request`: a user who cannot be migrated, or a recipient asking before the
/// transfer has completed). `429`: no request leaves before Apple's `Retry-After`, the
/// run's pace halves, and the user is asked again (`AppleSignedPost.retrying`); `5xx` and
/// timeouts retried; then unknown.
/// Nothing here logs; nothing returned holds the token or the secret.
public final class AppleUserMigration {
    public static let defaultMigrationURL = "https://appleid.apple.com/auth/usermigrationinfo"
    static let scope = "user.migration"

    public enum Verdict: Sendable, Equatable {
        /// Apple's answer: `transfer_sub` (export), or `sub` with `email` and
        /// `is_private_email` when given (import).
        case exchanged([String: String])
        /// Apple refused this user; `code` is Apple's error code.
        case refused(code: String)
        /// Apple refused the client itself (or the token request): stop the run.
        case configurationError(code: String)
        /// A freshly renewed access token was refused too: stop the run.
        case tokenRefused
        /// No decision after every attempt; `reason` is a short code.
        case unknown(reason: String)
    }

    public let migrationURL: String
    public let clientID: String
    public let client: AppleSignedPost
    /// Access tokens obtained so far (the first and each renewal).
    public private(set) var tokensObtained = 0
    private var token: (value: String, renewAt: ContinuousClock.Instant)?

    public init(migrationURL: String, clientID: String, client: AppleSignedPost) {
        self.migrationURL = migrationURL
        self.clientID = clientID
        self.client = client
    }

    /// The sending team's exchange: `sub` for the transfer identifier of `target`'s team.
    public func export(subject: String, target: String) -> Verdict {
        ask(form: [("sub", subject), ("target", target)], answer: "transfer_sub")
    }

    /// The recipient's exchange: a transfer identifier for the new `sub`.
    public func importUser(transferSubject: String) -> Verdict {
        ask(form: [("transfer_sub", transferSubject)], answer: "sub")
    }

    /// Gets an access token now when none is held or the held one is due for renewal;
    /// nil when one is ready, else the verdict that stops the run.
    func prepareToken() -> Verdict? {
        if let token, ContinuousClock.now < token.renewAt { return nil }
        token = nil
        return client.retrying { tokenAttempt() }
    }

    private func tokenAttempt() -> (Verdict?, retry: AppleSignedPost.Retry) {
        let response: HTTPSResponse
        switch client.postSigned(
            client.tokenURL, clientID: clientID,
            form: { clientSecret in
                [
                    ("grant_type", "client_credentials"), ("scope", Self.scope), ("client_id", clientID),
                    ("client_secret", clientSecret),
                ]
            })
        {
        case .answered(let answer): response = answer
        case .secretFailed: return (.configurationError(code: "client_secret_signing_failed"), .final)
        case .unreachable(let code): return (.unknown(reason: "token_" + code), .later)
        }
        switch response.status {
        case 200:
            guard case .object(let members)? = try? StrictJSONParser.parse(response.body),
                case .string(let value)? = members["access_token"], !value.isEmpty
            else { return (.unknown(reason: "token_answer_invalid"), .final) }
            var lifetime: Int64 = 3600
            if case .integer(let seconds)? = members["expires_in"], seconds > 0 { lifetime = min(seconds, 3600) }
            // Renewed before its end: five minutes early, or a fifth of a short lifetime.
            let marginMilliseconds = min(300_000, lifetime * 1000 / 5)
            token = (value, ContinuousClock.now + .milliseconds(lifetime * 1000 - marginMilliseconds))
            tokensObtained += 1
            return (nil, .final)
        case 400, 401:
            let code = AppleSignedPost.errorCode(response.body) ?? "no_error_code"
            return (.configurationError(code: code), .final)
        case 429:
            return (.unknown(reason: "token_http_429"), .throttled)
        case 500...599:
            return (.unknown(reason: "token_http_\(response.status)"), .later)
        default:
            return (.unknown(reason: "token_http_\(response.status)"), .final)
        }
    }

    private func ask(form: [(String, String)], answer: String) -> Verdict {
        var renewed = false
        while true {
            if let stop = prepareToken() { return stop }
            let verdict = client.retrying { attemptOnce(form: form, answer: answer) }
            guard verdict == .tokenRefused else { return verdict }
            // invalid_grant: the token ended early (or expired); renew it once for this user.
            if renewed { return .tokenRefused }
            renewed = true
            token = nil
        }
    }

    private func attemptOnce(form: [(String, String)], answer: String) -> (Verdict, retry: AppleSignedPost.Retry) {
        guard let bearer = token?.value else { return (.tokenRefused, .final) }
        let response: HTTPSResponse
        switch client.postSigned(
            migrationURL, clientID: clientID, bearerToken: bearer,
            form: { clientSecret in
                form + [("client_id", clientID), ("client_secret", clientSecret)]
            })
        {
        case .answered(let answer): response = answer
        case .secretFailed: return (.configurationError(code: "client_secret_signing_failed"), .final)
        case .unreachable(let code): return (.unknown(reason: code), .later)
        }
        switch response.status {
        case 200:
            guard case .object(let members)? = try? StrictJSONParser.parse(response.body),
                case .string(let value)? = members[answer], UserKeyPart.isValidSubject(value)
            else { return (.unknown(reason: "answer_invalid"), .final) }
            var fields = [answer: value]
            if case .string(let email)? = members["email"], !email.isEmpty { fields["email"] = email }
            switch members["is_private_email"] {
            case .bool(let flag)?: fields["is_private_email"] = flag ? "true" : "false"
            case .string(let text)? where text == "true" || text == "false": fields["is_private_email"] = text
            default: break
            }
            return (.exchanged(fields), .final)
        case 400, 401:
            switch AppleSignedPost.errorCode(response.body) {
            case "invalid_grant"?, "invalid_token"?:
                return (.tokenRefused, .final)
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
