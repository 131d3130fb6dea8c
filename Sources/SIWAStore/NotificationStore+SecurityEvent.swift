import SIWAJSON
import SIWARedis
import SIWAVerification

extension NotificationStore {
    /// How long a `verification` event's arrival is kept (`P:google:verification:<state>`):
    /// a week, for `siwa-endpoint google verify` to find.
    public static let verificationArrivalTTL: Duration = .seconds(7 * 86_400)

    /// Applies one verified Security Event Token from Google: every event, for every client
    /// ID its `aud` names, in one script call (`securityEventScript`). `receivedAt` is Unix
    /// milliseconds: `updated_at`, the seen marker's value and a verification's
    /// `received_at`. A connection error on a connection that was up is retried once, as for
    /// Apple's: the script is idempotent per `jti` (a retry after a run that did commit finds
    /// the marker and answers `duplicate`; the token is stored either way).
    public func apply(_ securityEvent: VerifiedSecurityEvent, receivedAt: Int64) throws(RedisError) -> Outcome {
        for clientID in securityEvent.clientIDs where !UserKeyPart.isValidClientID(clientID) {
            throw RedisError(.unsafeKey, "a client ID holds a character that would break the key layout")
        }
        for event in securityEvent.events {
            if let subject = event.subject, !UserKeyPart.isValidSubject(subject) {
                throw RedisError(.unsafeKey, "a sub holds a character that would break the key layout")
            }
        }
        let wasConnected = connection.isConnected
        do {
            return try runSecurityEventScript(securityEvent, receivedAt: receivedAt)
        } catch  where error.isConnectionError && error.code != .timedOut && wasConnected {
            return try runSecurityEventScript(securityEvent, receivedAt: receivedAt)
        }
    }

    private func runSecurityEventScript(_ securityEvent: VerifiedSecurityEvent, receivedAt: Int64) throws(RedisError)
        -> Outcome
    {
        let (keyList, arguments) = securityEventArguments(securityEvent, receivedAt: receivedAt)
        let keyCount = Array(String(keyList.count).utf8)
        let reply: RedisReply
        // EVAL each time: the script is cached by Redis under its SHA after the first call,
        // and Google's tokens are rare enough that a second round trip for EVALSHA is not worth
        // the state.
        reply = try connection.command(
            [Array("EVAL".utf8), Array(Self.securityEventScript.utf8), keyCount] + keyList + arguments)
        guard let text = reply.string, let outcome = Outcome(rawValue: text) else {
            throw RedisError(
                .unexpectedReply, "the security event script returned something other than an outcome name")
        }
        return outcome
    }

    /// KEYS and ARGV in the order the script reads them.
    func securityEventArguments(_ securityEvent: VerifiedSecurityEvent, receivedAt: Int64) -> (
        keys: [[UInt8]], arguments: [[UInt8]]
    ) {
        var keyList: [[UInt8]] = [
            Array(keys.googleSeen(tokenID: securityEvent.tokenID).utf8), Array(keys.events.utf8),
        ]
        let eventTime = securityEvent.eventTimeMilliseconds
        var arguments: [[UInt8]] = [
            Array(keys.notifications.utf8), Array(String(receivedAt).utf8),
            Array(String(max(1, seenMarkerTTL.wholeMilliseconds)).utf8),
            Array(String(max(1, streamMaximumLength)).utf8), Array(securityEvent.tokenID.utf8),
            Array(String(eventTime).utf8), Array(String(Self.verificationArrivalTTL.wholeMilliseconds).utf8),
        ]
        for clientID in securityEvent.clientIDs {
            for event in securityEvent.events {
                var keyIndex = 0
                switch event.type {
                case .verification:
                    if let state = event.state {
                        keyList.append(Array(keys.googleVerification(state: state).utf8))
                        keyIndex = keyList.count
                    }
                case .sessionsRevoked, .tokensRevoked, .accountDisabled, .accountEnabled,
                    .accountCredentialChangeRequired:
                    if let subject = event.subject {
                        keyList.append(Array(keys.googleUser(clientID: clientID, subject: subject).utf8))
                        keyIndex = keyList.count
                    }
                case .tokenRevoked, .unknown: break
                }
                let token = event.revokedToken
                var message: [(String, JSONValue)] = [
                    ("provider", .string("google")), ("client_id", .string(clientID)),
                    ("sub", .string(event.subject ?? "")), ("type", .string(event.type.name)),
                    ("raw_type", .string(event.rawType)), ("event_time", .integer(eventTime)),
                    ("jti", .string(securityEvent.tokenID)),
                ]
                if let reason = event.reason { message.append(("reason", .string(reason))) }
                if let state = event.state { message.append(("state", .string(state))) }
                if let token {
                    message += [
                        ("token_type", .string(token.tokenType)),
                        ("token_identifier_alg", .string(token.identifierAlgorithm)),
                        ("token", .string(token.identifier)),
                    ]
                }
                var head = Array(JSONWriter.object(message).utf8)
                // The script appends the applied flag, which only it knows.
                head.removeLast()
                head += Array(",\"applied\":".utf8)
                arguments += [
                    Array(String(keyIndex).utf8), Array(clientID.utf8), Array((event.subject ?? "").utf8),
                    Array(event.type.name.utf8), Array(event.rawType.utf8), Array((event.reason ?? "").utf8),
                    Array((event.state ?? "").utf8), Array((token?.tokenType ?? "").utf8),
                    Array((token?.identifierAlgorithm ?? "").utf8), Array((token?.identifier ?? "").utf8),
                    Array((event.endsSessions ? "1" : "0").utf8), head,
                ]
            }
        }
        return (keyList, arguments)
    }
}
