import SIWASupport

/// Why a Redis operation failed: a stable code and a plain message.
///
/// Messages name what went wrong and where (the endpoint's host, a setting) but
/// never a password, a token or an email address.
public struct RedisError: CodedError {
    public let code: Code
    public let message: String
    /// What lay under the failure, as the library gave it, beside the message's text.
    public let cause: Cause?
    /// Which configured thing the failure is about, when it is one (the sentinels' list, a
    /// TLS file...): the application names its setting from this, never from the message.
    public let field: Field?
    /// When the server's certificate was refused: what it must chain to and which configured
    /// thing gave the name it must carry, for the application to word beside the message.
    public let certificateRefusal: CertificateRefusal?
    /// The kind of Redis's error reply (its first word), for a `serverError`; nil otherwise.
    public let reply: ReplyKind?

    public init(
        _ code: Code, _ message: String, cause: Cause? = nil, field: Field? = nil,
        certificateRefusal: CertificateRefusal? = nil
    ) {
        self.code = code
        self.message = message
        self.cause = cause
        self.field = field
        self.certificateRefusal = certificateRefusal
        reply = code == .serverError ? ReplyKind(reply: message) : nil
    }

    /// What a refused server certificate had to satisfy, as configured: the message keeps
    /// OpenSSL's reason, this keeps which settings the operator should look at.
    public struct CertificateRefusal: Sendable, Hashable {
        /// The CA file the certificate must chain to (`.tlsCAFile`), or nil: the system trust store.
        public let trust: Field?
        /// The name the certificate must carry.
        public let serverName: String
        /// Where that name came from: `.tlsServerName`, or `.url` (the host connected to).
        public let nameSource: Field

        public init(trust: Field?, serverName: String, nameSource: Field) {
            self.trust = trust
            self.serverName = serverName
            self.nameSource = nameSource
        }
    }

    /// A configured thing a failure can be about. The application maps each to its setting.
    public enum Field: String, Sendable, CaseIterable {
        /// The Redis URL: its address, user or password.
        case url
        /// The list of sentinels.
        case sentinels
        /// The master name the sentinels monitor.
        case sentinelMasterName
        /// The sentinels' password.
        case sentinelPassword
        /// TLS to the sentinels.
        case sentinelTLS
        /// The list of cluster nodes.
        case clusterNodes
        /// The CA certificates file of TLS to Redis.
        case tlsCAFile
        /// The name a Redis server's certificate must carry, when not the host connected to.
        case tlsServerName
        /// The client certificate file of TLS to Redis.
        case tlsCertificateFile
        /// The client key file of TLS to Redis.
        case tlsKeyFile
    }

    /// The cause of a failure, kept rather than flattened to text.
    public indirect enum Cause: Sendable {
        /// hiredis' context error code (`REDIS_ERR_IO`, `REDIS_ERR_EOF`, `REDIS_ERR_PROTOCOL`...).
        case hiredis(code: Int32)
        /// An earlier failure this one wraps (a SELECT refused while logging in).
        case underlying(RedisError)
        /// The server's error reply to the AUTH sent while logging in: a wrong user or password,
        /// or a password the server does not want.
        case loginRefused(RedisError)
    }

    /// The server refused the AUTH this connection sent when it logged in.
    public var isLoginRefused: Bool {
        if case .loginRefused = cause { return true }
        return false
    }

    /// True when the failure is about reaching Redis, not about what Redis answered:
    /// the caller may retry later, and the connection reconnects on its next command.
    /// The sentinel codes count too: without a primary's address, Redis cannot be reached.
    public var isConnectionError: Bool {
        code == .connectionFailed || code == .connectionLost || code == .timedOut || code == .sentinelUnreachable
            || code == .sentinelUnknownMaster || code == .sentinelsUnsettled || code == .sentinelLoginRefused
            || code == .tlsRefused
            || code == .clusterRefused
    }

    /// True when the same command may succeed later: connection trouble or a transient reply.
    /// False for what would fail again the same way (a key of the wrong type, a script error).
    public var isTransient: Bool {
        isConnectionError || code == .replicaShortfall || reply?.isTransient == true
    }

    /// The first word of Redis's reply (`NOPERM`, `NOAUTH`, `WRONGPASS`, `ERR`, ...), or the
    /// code for failures that are not a reply: what an operator searches for first.
    public var replyKind: String { reply?.word ?? code.rawValue }

    /// A stable, machine-readable error code. New codes break no caller.
    public struct Code: ErrorCode {
        public let rawValue: String

        init(_ rawValue: String) { self.rawValue = rawValue }

        /// A Redis URL that cannot be used (the message names the part).
        public static let invalidEndpoint = Code("redis_invalid_endpoint")
        /// A connection or store setting outside the bounds its `validate()` accepts.
        public static let invalidSetting = Code("redis_invalid_setting")
        /// Connecting, AUTH or SELECT failed.
        public static let connectionFailed = Code("redis_connection_failed")
        /// An established connection broke, or a command timed out.
        public static let connectionLost = Code("redis_connection_lost")
        /// Redis did not answer within the connection's timeout (connecting or a command); the
        /// command may still run when Redis resumes.
        public static let timedOut = Code("redis_timeout")
        /// Redis answered the command with an error reply; the message is that reply.
        public static let serverError = Code("redis_server_error")
        /// Redis answered with a reply of a shape the caller cannot use.
        public static let unexpectedReply = Code("redis_unexpected_reply")
        /// A client ID or subject would break the key layout (a hash-tag brace, or a
        /// colon in the client ID), so it cannot be stored safely.
        public static let unsafeKey = Code("redis_unsafe_key")
        /// No sentinel of the list answered.
        public static let sentinelUnreachable = Code("redis_sentinel_unreachable")
        /// The sentinels answered, but none monitors the master name asked for.
        public static let sentinelUnknownMaster = Code("redis_sentinel_unknown_master")
        /// The sentinels answered, but do not yet agree on a settled primary (too few answered,
        /// a failover under way, a quorum sees the master down): nothing is written until they do.
        public static let sentinelsUnsettled = Code("redis_sentinels_unsettled")
        /// The sentinels refused their password (or want one and got none).
        public static let sentinelLoginRefused = Code("redis_sentinel_login_refused")
        /// Fewer replicas than asked for acknowledged a write in time.
        public static let replicaShortfall = Code("redis_replica_shortfall")
        /// TLS to Redis cannot work as set: the server's certificate was refused (untrusted,
        /// expired, or not naming the host), or a TLS file cannot be used. The message names
        /// the setting. Redis is unreachable meanwhile, as in an outage: records spool.
        public static let tlsRefused = Code("redis_tls_refused")
        /// The cluster nodes given answered but are not a cluster (cluster mode
        /// off), or refused the login: a setting to fix. Redis is unreachable meanwhile.
        public static let clusterRefused = Code("redis_cluster_refused")
    }
}
