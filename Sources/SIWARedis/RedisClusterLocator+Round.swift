extension RedisClusterLocator {
    /// What one discovery's nodes answered when none named a usable owner, sorted by kind,
    /// and the error that says why: a setting to fix (not a cluster, the login, TLS) before
    /// an outage (stale views, the slot uncovered, nobody answering).
    struct Round {
        let slot: Int
        private var unreachable: [String] = []
        private var notCluster: [String] = []
        private var uncovered: [String] = []
        private var refusedLogin: [String] = []
        private var stale: [String] = []
        private var certificateRefusals: [RedisError] = []

        init(slot: Int) {
            self.slot = slot
        }

        /// `CLUSTER SLOTS` could not be asked of `node`, or it refused it.
        mutating func recordFailure(_ error: RedisError, from node: Node) {
            if error.reply == .err && error.message.contains("cluster support disabled") {
                notCluster.append(node.description)
            } else if error.isLoginRefused {
                refusedLogin.append("\(node): \(error.message)")
            } else {
                if error.code == .tlsRefused { certificateRefusals.append(error) }
                unreachable.append("\(node): \(error.message)")
            }
        }

        /// `node` answered, but no range of its answer holds the slot.
        mutating func recordUncovered(_ node: Node) {
            uncovered.append(node.description)
        }

        /// `node` named `owner`, which could not be used (`reason`).
        mutating func recordStale(_ node: Node, named owner: Node, _ reason: RedisError) {
            if reason.code == .tlsRefused { certificateRefusals.append(reason) }
            stale.append("\(node) named \(owner): \(reason.message)")
        }

        /// Why no node gave a usable owner.
        var error: RedisError {
            if !notCluster.isEmpty {
                return RedisError(
                    .clusterRefused,
                    "\(notCluster.joined(separator: ", ")) is not in cluster mode "
                        + "(cluster-enabled no)", field: .clusterNodes)
            }
            if !refusedLogin.isEmpty && unreachable.isEmpty && stale.isEmpty {
                return RedisError(
                    .clusterRefused,
                    "the cluster refused the login (\(refusedLogin.joined(separator: "; ")))", field: .url)
            }
            if let refused = certificateRefusals.first(where: { $0.certificateRefusal != nil })
                ?? certificateRefusals.first
            {
                // No node usable, and TLS refused by one at least: the refusal is what to fix
                // (a certificate or a TLS setting), not an outage that ends by itself.
                return RedisError(
                    .tlsRefused,
                    "no cluster node could be used: \((unreachable + stale).joined(separator: "; "))",
                    field: refused.field, certificateRefusal: refused.certificateRefusal)
            }
            if !stale.isEmpty {
                return RedisError(
                    .connectionFailed,
                    "no node named a slot owner that could be confirmed (\(stale.joined(separator: "; "))"
                        + (unreachable.isEmpty ? "" : "; unreachable: \(unreachable.joined(separator: "; "))") + ")")
            }
            if !uncovered.isEmpty {
                return RedisError(
                    .connectionFailed,
                    "no node owns hash slot \(slot) (asked \(uncovered.joined(separator: ", "))); the cluster is down")
            }
            return RedisError(
                .connectionFailed,
                "no node answered CLUSTER SLOTS (\(unreachable.joined(separator: "; ")))",
                field: .clusterNodes)
        }
    }
}
