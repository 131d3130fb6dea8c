import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWATelemetry

/// A Redis server's (or a sentinel's) certificate refused by the endpoint: untrusted,
/// expired, or not naming the host. One rule in every mode (one node, Sentinel, Cluster),
/// at start and at run time: it is an outage, not a setting error. `serve` starts and
/// spools, `/healthz` answers 503 naming `redis_tls_refused` and the reason, and it ends
/// when a certificate the endpoint accepts is back (a renewal), with no restart. `serve
/// --check` reports it as a finding (exit status 3). A TLS file of this side that cannot be
/// used (the CA file, the client certificate or key) is a setting (exit status 2): that is
/// not a `ServerCertificateRefusal`.
public struct ServerCertificateRefusal: Sendable, Equatable {
    /// OpenSSL's reason (`certificate has expired`, `unable to get local issuer certificate`,
    /// `hostname mismatch`...).
    public let reason: String
    /// The setting to look at: the CA file (or the system trust store's setting) for a
    /// certificate that does not chain or has expired, the setting that gives the name for a
    /// name mismatch.
    public let setting: String
    /// The whole refusal as an operator reads it: where, why, and what the certificate must
    /// satisfy, in settings.
    public let message: String

    /// The refusal `error` is, or nil when it is not a refused server certificate.
    public init?(_ error: RedisError) {
        guard error.code == .tlsRefused, let refusal = error.certificateRefusal else { return nil }
        let marker = "the certificate was refused: "
        if let range = error.message.range(of: marker) {
            // The first node's reason, when the message lists several (sentinels, cluster nodes).
            reason = String(error.message[range.upperBound...].prefix { $0 != ";" && $0 != ")" })
        } else {
            reason = error.message
        }
        if reason.contains("hostname mismatch") || reason.contains("IP address mismatch") {
            setting = refusal.nameSource.setting
        } else {
            setting = (refusal.trust ?? .tlsCAFile).setting
        }
        message = error.operatorMessage
    }

    /// The members of a `redis_tls_refused` log line.
    public var logFields: [(String, JSONValue)] {
        [("reason", .string(reason)), ("setting", .string(setting)), ("message", .string(message))]
    }

    /// Logs it: one `redis_tls_refused` line, `when` saying at start or at run time.
    public func log(when: String) {
        EventLog.event("redis_tls_refused", level: "error", [("when", .string(when))] + logFields)
    }
}
