/// Why a Redis operation failed: a stable code and a plain message.
///
/// Messages name what went wrong and where (the endpoint's host, a setting) but
/// never a password, a token or an email address.
public struct RedisError: Error, Sendable, Equatable, CustomStringConvertible {
    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// True when the failure is about reaching Redis, not about what Redis answered:
    /// the caller may retry later, and the connection reconnects on its next command.
    public var isConnectionError: Bool { code == .connectionFailed || code == .connectionLost }

    public static func == (lhs: RedisError, rhs: RedisError) -> Bool { lhs.code == rhs.code }

    /// A stable, machine-readable error code. New codes break no caller.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String

        init(_ rawValue: String) { self.rawValue = rawValue }

        public var description: String { rawValue }

        /// A Redis URL that cannot be used (the message names the part).
        public static let invalidEndpoint = Code("redis_invalid_endpoint")
        /// Connecting, AUTH or SELECT failed.
        public static let connectionFailed = Code("redis_connection_failed")
        /// An established connection broke, or a command timed out.
        public static let connectionLost = Code("redis_connection_lost")
        /// Redis answered the command with an error reply; the message is that reply.
        public static let serverError = Code("redis_server_error")
        /// Redis answered with a reply of a shape the caller cannot use.
        public static let unexpectedReply = Code("redis_unexpected_reply")
        /// A client ID or subject would break the key layout (a hash-tag brace, or a
        /// colon in the client ID), so it cannot be stored safely.
        public static let unsafeKey = Code("redis_unsafe_key")
    }
}
