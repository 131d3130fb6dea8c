/// What the cluster's nodes answer, read: `CLUSTER SLOTS`'s node list and the `MOVED`/`ASK`
/// redirections. Pure (no socket), so each is tested on its own (`ClusterRepliesTests`).
extension RedisClusterLocator {
    /// One range of `CLUSTER SLOTS`: its slots, its primary, and every node it names.
    public struct SlotRange: Sendable, Equatable {
        public let slots: ClosedRange<Int>
        public let primary: Node
        /// The primary, then the replicas (those that name a usable node).
        public let nodes: [Node]
    }

    /// `CLUSTER SLOTS`: `[[start, end, [host, port, id, ...], [replica...]...], ...]`. A
    /// NULL host (`cluster-preferred-endpoint-type unknown-endpoint`) or an empty one (a
    /// node that does not know its address) means the node asked; `?` (a hostname endpoint
    /// type with no hostname announced) names no usable node, and is skipped.
    public static func slotRanges(_ reply: RedisReply, askedHost: String) -> [SlotRange] {
        guard let entries = reply.array else { return [] }
        var ranges: [SlotRange] = []
        for entry in entries {
            guard let parts = entry.array, parts.count >= 3, let start = parts[0].integer, let end = parts[1].integer,
                start <= end
            else { continue }
            let named: [Node?] = parts.dropFirst(2).map { part in
                guard let fields = part.array, fields.count >= 2, let port = fields[1].integer,
                    (1...65_535).contains(port)
                else { return nil }
                let host: String
                switch fields[0] {
                case .null: host = askedHost
                case let field:
                    guard let text = field.string, text != "?" else { return nil }
                    host = text.isEmpty ? askedHost : text
                }
                return Node(host: host, port: Int(port))
            }
            // The first is the range's primary: when it names no usable node, no replica stands in.
            guard let first = named.first, let primary = first else { continue }
            ranges.append(SlotRange(slots: Int(start)...Int(end), primary: primary, nodes: named.compactMap { $0 }))
        }
        return ranges
    }

    /// `MOVED <slot> <host:port>` or `ASK <slot> <host:port>`, parsed. An empty host
    /// (`MOVED 3999 :6381`, a node with no announced endpoint) means the host of the
    /// connection that got the answer, `connectionHost`; a host of `?` names no usable
    /// node: the slot moved, where to is unknown (`unknownNode`), and the cluster is asked
    /// again.
    public enum Redirect: Equatable {
        case moved(Node)
        case ask(Node)
        case unknownNode

        public init?(reply text: String, connectionHost: String) {
            let words = text.split(separator: " ", omittingEmptySubsequences: false)
            guard words.count == 3, words[0] == "MOVED" || words[0] == "ASK",
                let colon = words[2].lastIndex(of: ":"), let port = Int(words[2][words[2].index(after: colon)...]),
                (1...65_535).contains(port)
            else { return nil }
            var host = String(words[2][..<colon])
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            if host == "?" {
                self = .unknownNode
                return
            }
            let node = Node(host: host.isEmpty ? connectionHost : host, port: port)
            self = words[0] == "MOVED" ? .moved(node) : .ask(node)
        }
    }
}
