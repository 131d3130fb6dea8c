extension RedisError {
    /// What kind of error reply Redis sent: its first word, read once when the error is made,
    /// so that no caller matches Redis's text. A word this list does not name is `other`.
    public enum ReplyKind: Sendable, Hashable, CustomStringConvertible {
        /// `ERR`: a generic refusal (a bad argument, a script error, too many clients...).
        case err
        /// `LOADING`: Redis is loading its data after a restart.
        case loading
        /// `BUSY`: a script runs too long.
        case busy
        /// `OOM`: over `maxmemory`.
        case outOfMemory
        /// `READONLY`: a replica (a demoted primary, with Sentinel or Cluster).
        case readOnly
        /// `MASTERDOWN`: a replica that lost its primary.
        case masterDown
        /// `TRYAGAIN`: in a cluster, a multi-key command whose keys are split by a migration.
        case tryAgain
        /// `CLUSTERDOWN`: the cluster cannot serve the slot.
        case clusterDown
        /// `NOREPLICAS`: fewer replicas than `min-replicas-to-write`.
        case noReplicas
        /// `MISCONF`: snapshots fail, so writes are refused.
        case misconfigured
        /// `MOVED`: in a cluster, the slot is owned by another node.
        case moved
        /// `ASK`: in a cluster, the slot is being migrated and the key is on the target.
        case ask
        /// `NOAUTH`: the server wants a password and none was sent.
        case noAuth
        /// `WRONGPASS`: the user or password was refused.
        case wrongPassword
        /// `NOPERM`: the ACL user may not run the command or touch the key.
        case noPermission
        /// `WRONGTYPE`: a key holds another type.
        case wrongType
        /// `NOSCRIPT`: `EVALSHA` of a script the server does not hold.
        case noScript
        /// Any other first word, as Redis wrote it.
        case other(String)

        private static let named: [String: ReplyKind] = [
            "ERR": .err, "LOADING": .loading, "BUSY": .busy, "OOM": .outOfMemory, "READONLY": .readOnly,
            "MASTERDOWN": .masterDown, "TRYAGAIN": .tryAgain, "CLUSTERDOWN": .clusterDown, "NOREPLICAS": .noReplicas,
            "MISCONF": .misconfigured, "MOVED": .moved, "ASK": .ask, "NOAUTH": .noAuth, "WRONGPASS": .wrongPassword,
            "NOPERM": .noPermission, "WRONGTYPE": .wrongType, "NOSCRIPT": .noScript,
        ]

        /// The kind of the reply `text` (its first word, up to the first space); nil for an
        /// empty reply.
        public init?(reply text: some StringProtocol) {
            guard let word = text.split(separator: " ", maxSplits: 1).first else { return nil }
            self = Self.named[String(word)] ?? .other(String(word))
        }

        /// The first word, as Redis writes it.
        public var word: String {
            if case .other(let word) = self { return word }
            return Self.named.first { $0.value == self }?.key ?? ""
        }

        public var description: String { word }

        /// Replies that say "not now" rather than "never": Redis loading its data after a
        /// restart, a busy script, out of memory, a read-only replica, a cluster in trouble.
        public var isTransient: Bool {
            switch self {
            case .loading, .busy, .outOfMemory, .readOnly, .masterDown, .tryAgain, .clusterDown, .noReplicas,
                .misconfigured:
                true
            default: false
            }
        }
    }
}
