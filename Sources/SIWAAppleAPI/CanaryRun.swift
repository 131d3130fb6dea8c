import Foundation
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWAStore
import SIWASupport

/// One canary run, after its arguments and settings: Redis read first, the token revoked at
/// Apple, then the user's hash read until Apple's `consent-revoked` is applied or the
/// timeout passes. See `CanaryCommand` for why.
public final class CanaryRun {
    /// How often Redis is read while waiting.
    static let pollInterval: Duration = .milliseconds(250)

    let settings: AppleRunSettings
    let revocation: AppleTokenRevocation
    let clientID: String
    let subject: String
    /// One JSON document on standard output (`--json`), not the lines of text.
    let json: Bool
    let output: CommandOutput
    let connection: RedisConnection

    /// `connection`: serve's Redis, found as serve finds it.
    public init(
        settings: AppleRunSettings, revocation: AppleTokenRevocation, clientID: String, subject: String, json: Bool,
        output: CommandOutput, connection: RedisConnection
    ) {
        self.settings = settings
        self.revocation = revocation
        self.clientID = clientID
        self.subject = subject
        self.json = json
        self.output = output
        self.connection = connection
    }

    /// Spends `token` (of `kind`) and waits up to `timeout` seconds; the exit status.
    public func run(token: String, kind: AppleTokenRevocation.TokenKind, timeout: Int64) -> ExitStatus {
        /// The run's end: with `--json`, its one document on standard output (the messages
        /// stay on standard error); the exit status.
        func end(_ outcome: String, _ status: ExitStatus, _ fields: [(String, JSONValue)] = []) -> ExitStatus {
            if json { output.json([("outcome", .string(outcome)), ("sub", .string(subject))] + fields) }
            return status
        }
        let userKey = RedisKeyLayout(prefix: settings.keyPrefix).user(clientID: clientID, subject: subject)
        let before: [String: String]
        do {
            before = try userHash(connection, userKey)
        } catch {
            output.error(
                "siwa-endpoint canary: Redis does not answer (\(error.code.rawValue): \(error.operatorMessage)); "
                    + "nothing was revoked, the token is kept")
            return end("redis_unreachable", .unreachable, [("revoked", .bool(false))])
        }

        let revokedAt = Int64(Date().timeIntervalSince1970 * 1000)
        let started = ContinuousClock.now
        switch revocation.revoke(clientID: clientID, token: token, kind: kind) {
        case .revoked where !json:
            output.line(
                "revoked at Apple at \(UTCTime.format(milliseconds: revokedAt)); waiting up to \(timeout) s for its "
                    + "consent-revoked")
        case .revoked:
            break
        case .configurationError(let code):
            output.error(
                "siwa-endpoint canary: Apple refused our client (\(code)): check \(SettingKey.appleTeamID.name), "
                    + "\(SettingKey.appleKeyID.name), \(SettingKey.applePrivateKeyFile.name) and that \(clientID) belongs to that team; "
                    + "nothing was revoked")
            return end("client_refused", .usage, [("error", .string(code)), ("revoked", .bool(false))])
        case .refused(let code):
            output.error(
                "siwa-endpoint canary: Apple refused the revocation (\(code)): the token is not one Apple "
                    + "issued to \(clientID), or is already spent; get a fresh one")
            return end("refused", .providerRefused, [("error", .string(code))])
        case .unknown(let reason):
            output.error(
                "siwa-endpoint canary: Apple did not confirm the revocation (\(reason)): the token may or may "
                    + "not be spent; check SIWA_APPLE_REVOKE_URL and the outbound HTTPS route")
            return end("unconfirmed", .providerRefused, [("reason", .string(reason))])
        }

        let deadline = started + .seconds(timeout)
        var lastError: RedisError?
        var everRead = false
        while true {
            do {
                let now = try userHash(connection, userKey)
                everRead = true
                lastError = nil
                if let revoked = now["consent_revoked_at"], revoked != before["consent_revoked_at"] {
                    return arrived(
                        now, revokedAt: revokedAt, seen: ContinuousClock.now - started, subject: subject, json: json)
                }
            } catch {
                lastError = error
            }
            if ContinuousClock.now >= deadline { break }
            Thread.sleep(forTimeInterval: Self.pollInterval.inSeconds)
        }
        if let lastError, !everRead {
            output.error(
                "siwa-endpoint canary: Redis stopped answering after the revocation (\(lastError.code.rawValue)); "
                    + "whether the notification arrived is unknown: `siwa-endpoint user \(clientID) \(subject)` "
                    + "once Redis answers")
            return end("redis_lost", .unreachable, [("revoked_at", .integer(revokedAt))])
        }
        output.error(
            """
            siwa-endpoint canary: no consent-revoked for \(subject) was applied within \(timeout) s of the revocation. Check:
              - the Server-to-Server Notification Endpoint registered with Apple for the primary App ID of \(clientID)'s group: this URL, exactly
              - that SIWA_CLIENT_IDS lists \(clientID) (the log's aud_not_served lines name a refused aud)
              - the certificate (`scripts/check-endpoint URL`: chain, expiry, ATS suites)
              - the firewall: Apple's posts must reach nginx (its access log shows each POST)
              - the endpoint's own log and `siwa-endpoint status`
            The token is spent: the next run needs a fresh sign-in.
            """)
        return end(
            "not_arrived", .failed, [("revoked_at", .integer(revokedAt)), ("timeout_seconds", .integer(timeout))])
    }

    /// The consent-revoked is in: prints the times (`json`: only the JSON document) and returns 0.
    private func arrived(_ hash: [String: String], revokedAt: Int64, seen: Duration, subject: String, json: Bool)
        -> ExitStatus
    {
        var fields: [(String, JSONValue)] = [("outcome", .string("arrived")), ("sub", .string(subject))]
        fields.append(("revoked_at", .integer(revokedAt)))
        if let received = hash["updated_at"].flatMap({ Int64($0) }) {
            fields.append(("applied_at", .integer(received)))
            fields.append(("seconds_to_applied", .number(Double(max(0, received - revokedAt)) / 1000)))
            if !json {
                output.line(
                    "consent-revoked for \(subject) applied \(String(format: "%.2f", Double(max(0, received - revokedAt)) / 1000)) s "
                        + "after the revocation (received \(UTCTime.format(milliseconds: received)); seen in Redis after "
                        + "\(String(format: "%.2f", seen.inSeconds)) s)")
            }
        }
        output.json(fields)
        return .success
    }

    private func userHash(_ connection: RedisConnection, _ key: String) throws(RedisError) -> [String: String] {
        try StoreReader(connection: connection).hash(key)
    }
}
