import SIWAFastCGI
import SIWAJSON
import SIWAKeys
import SIWARedis
import SIWASettings
import SIWAStore
import SIWATelemetry
import SIWAVerification

/// The Google path (RFC 8935 push delivery), top to bottom: media type → token →
/// verification (Google's keys and issuer, refreshed on an unknown kid) → the store's one
/// script call → 202 with an empty body. A refused token is 400 `{"err","description"}`
/// with `Content-Language: en`; a question about our side (no keys or issuer yet) is 503
/// with `Retry-After`, and Google redelivers. With Redis unable to take a verified token, the
/// spool does (fsync'd, then 202: RFC 8935's "validated and persisted"), as for Apple's; 503
/// only when neither can.
extension NotificationResponder {
    func receiveSecurityEvent(_ request: FastCGIRequest, _ google: SecurityEventReceiver) -> Reply {
        guard SecurityEventReceiver.isSecurityEventMediaType(request.contentType) else {
            google.traffic.recordRefusal(label: ClientTraffic.noneLabel, reason: .malformed)
            return Self.securityEventRefusal(
                code: "invalid_request", internalCode: "content_type_not_secevent",
                description: "the Content-Type is not \(SecurityEventReceiver.mediaType)")
        }
        let token: [UInt8]
        switch request.body {
        case .complete(let bytes): token = bytes
        case .tooLarge:
            google.traffic.recordRefusal(label: ClientTraffic.noneLabel, reason: .malformed)
            return Self.securityEventRefusal(
                code: "invalid_request", internalCode: VerificationError.Code.bodyTooLarge.rawValue,
                description: "the token is over the size limit")
        case .incomplete:
            google.traffic.recordRefusal(label: ClientTraffic.noneLabel, reason: .malformed)
            return Self.status(400, "refused", errorCode: "body_incomplete")
        }

        let securityEvent: VerifiedSecurityEvent
        do {
            securityEvent = try google.verifier.verify(
                token: token, keys: google.keys, issuer: google.keys.keys.issuer, now: clock.wallSeconds())
        } catch {
            let reason = ClientTraffic.RefusalReason(error.code)
            google.traffic.recordRefusal(
                label: google.traffic.label(
                    ofAudience: reason == .malformed ? nil : Self.unverifiedAudience(of: token)),
                reason: reason)
            guard let code = error.securityEventErrorCode else {
                // About our side (no keys or issuer yet, our entry for the kid unusable).
                return Self.status(503, "unavailable", errorCode: error.code.rawValue)
            }
            return Self.securityEventRefusal(code: code, internalCode: error.code.rawValue, description: error.message)
        }

        var result = Reply(
            status: 202, outcome: "", type: securityEvent.events.first?.type.name,
            clientID: securityEvent.clientIDs.first, body: "")
        if securityEvent.events.contains(where: { $0.type == .unknown }) {
            log.event(
                "unknown_security_event_type", level: "warning",
                [
                    ("raw_type", .string(securityEvent.events.first { $0.type == .unknown }?.rawType ?? "")),
                    ("client_id", .string(securityEvent.clientIDs.first ?? "")),
                ])
        }
        if breaker.isOpen {
            result.logFields = [("redis_circuit", .string("open"))]
            return spoolInstead(securityEvent, result)
        }
        let receivedAt = clock.wallMilliseconds()
        do {
            let acknowledged = try stores.withStore { store throws(RedisError) in
                try store.applyAcknowledged(securityEvent, receivedAt: receivedAt)
            }
            result.outcome = acknowledged.outcome.rawValue
            if acknowledged.isShortfall || acknowledged.replicaCheckRefusal != nil,
                let unavailable = keepCopy(securityEvent, acknowledged, result)
            {
                return unavailable
            }
        } catch {
            metrics.recordRedisError()
            if error.isRecordSpecific { return recordRefused(error, result) }
            recordDeploymentFailure(error)
            return spoolInstead(securityEvent, result, attemptedAt: receivedAt)
        }
        for clientID in securityEvent.clientIDs { _ = google.traffic.recordGenuine(clientID: clientID, at: receivedAt) }
        result.contentType = ""
        return result
    }

    /// Redis cannot take the token now: the spool does (fsync'd, then 202 with an empty body;
    /// the replayer applies it through the same script once Redis answers), or the answer is
    /// a 503 and Google redelivers it.
    func spoolInstead(_ securityEvent: VerifiedSecurityEvent, _ result: Reply, attemptedAt: Int64? = nil) -> Reply {
        var result = result
        do {
            try spool.append(securityEvent, attemptedAt: attemptedAt)
            result.outcome = "spooled"
            drain?.nudge()
        } catch {
            return storeUnavailable(result, error)
        }
        result.contentType = ""
        return result
    }

    /// Fewer replicas than `SIWA_REDIS_MIN_REPLICAS` acknowledged the token's write, or Redis
    /// refused to count them: a copy goes to the spool before the 202, as `keepCopy` does for
    /// Apple's (the replay of the copy is a `duplicate` where the write survived). Returns a
    /// 503 only when the copy cannot be kept.
    func keepCopy(
        _ securityEvent: VerifiedSecurityEvent, _ acknowledged: NotificationStore.Acknowledged, _ result: Reply
    ) -> Reply? {
        let clientID = JSONValue.string(securityEvent.clientIDs.first ?? "")
        if let refusal = acknowledged.replicaCheckRefusal {
            log.event(
                "redis_replica_check_refused", level: "error",
                [
                    ("error", .string(refusal.code.rawValue)), ("reason", .string(refusal.operatorMessage)),
                    ("outcome", .string(acknowledged.outcome.rawValue)), ("provider", .string("google")),
                    ("client_id", clientID),
                ])
        } else {
            metrics.recordReplicaShortfall()
            log.event(
                "redis_replica_shortfall", level: "warning",
                [
                    ("replicas", .integer(Int64(acknowledged.replicas ?? 0))),
                    ("wanted", .integer(Int64(configuration.redis.minimumReplicas))),
                    ("outcome", .string(acknowledged.outcome.rawValue)), ("provider", .string("google")),
                    ("client_id", clientID),
                ])
        }
        do {
            try spool.append(securityEvent)
            drain?.nudge()
            return nil
        } catch {
            return storeUnavailable(result, error)
        }
    }

    /// RFC 8935's error response: 400, `{"err","description"}`, `Content-Language: en`. The
    /// description never quotes the token.
    static func securityEventRefusal(code: String, internalCode: String, description: String) -> Reply {
        Reply(
            status: 400, outcome: "refused", errorCode: internalCode,
            body: JSONWriter.object([("err", .string(code)), ("description", .string(description))]),
            headers: [FastCGIResponse.Header("Content-Language", "en")],
            logFields: [("err", .string(code))])
    }

    /// The `aud` a refused token claims, read without any check: only to count the refusal
    /// under a configured client ID (a forged token can move a refusal count, nothing else).
    static func unverifiedAudience(of token: [UInt8]) -> String? {
        let parts = token.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, let claims = Base64URL.decode(parts[1]),
            case .object(let members)? = try? StrictJSONParser.parse(claims)
        else { return nil }
        switch members["aud"] {
        case .string(let audience)?: return audience
        case .array(let elements)?:
            if case .string(let audience)? = elements.first { return audience }
            return nil
        default: return nil
        }
    }
}
