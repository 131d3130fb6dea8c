import Foundation
import Synchronization

/// Finds the current Redis primary through Redis Sentinel, the way Redis' "Guidelines
/// for Redis clients with support for Redis Sentinel" ask:
///
/// 1. ask the sentinels in order for `SENTINEL get-master-addr-by-name <master>`;
///    the first that answers is moved to the front of the list;
/// 2. the connection that uses the address confirms it with `ROLE` (see
///    `RedisConnection`) before sending anything else;
/// 3. a connection failure, a timeout, `READONLY` or a `ROLE` that is not master makes
///    the connection `forget` the address, so the next connection asks again.
///
/// Shared by every worker connection and the spool replayer (thread safe). Discoveries
/// run one at a time: workers that find the address forgotten while another one asks
/// wait for that answer instead of asking the sentinels themselves.
public final class RedisPrimaryLocator: Sendable {
    /// One sentinel's address.
    public struct Sentinel: Sendable, Equatable, CustomStringConvertible {
        public let host: String
        public let port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// A primary's address as the sentinels gave it.
    public struct Primary: Sendable, Equatable, CustomStringConvertible {
        public let host: String
        public let port: Int

        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    public let masterName: String
    private let sentinelPassword: String?
    /// TLS to the sentinels; nil: plain TCP.
    private let sentinelTLS: RedisTLS?
    private let timeout: Duration

    private struct State {
        var sentinels: [Sentinel]
        var primary: Primary?
        /// The last primary any discovery found: a new one is a failover seen.
        var lastFound: Primary?
        var discoveries = 0
        var failovers = 0
    }

    private let state: Mutex<State>
    /// Held while the sentinels are asked, so one discovery runs at a time.
    private let discovery = Mutex(())

    /// `timeout` bounds each sentinel's connect and answer.
    public init(
        sentinels: [Sentinel], masterName: String, sentinelPassword: String?, timeout: Duration,
        sentinelTLS: RedisTLS? = nil
    ) {
        self.masterName = masterName
        self.sentinelPassword = sentinelPassword
        self.sentinelTLS = sentinelTLS
        self.timeout = timeout
        state = Mutex(State(sentinels: sentinels))
    }

    /// Parses `host:port,host:port,...` (IPv6 hosts in brackets); the error says what is wrong.
    public static func parseSentinels(_ text: String) -> Result<[Sentinel], RedisError> {
        var sentinels: [Sentinel] = []
        for item in text.split(separator: ",") {
            let entry = item.trimmingCharacters(in: .whitespaces)
            let host: Substring
            let portText: Substring
            if entry.hasPrefix("["), let close = entry.firstIndex(of: "]") {
                host = entry[entry.index(after: entry.startIndex)..<close]
                let rest = entry[entry.index(after: close)...]
                guard rest.hasPrefix(":") else { return .failure(invalid("'\(entry)' has no :port")) }
                portText = rest.dropFirst()
            } else if let colon = entry.lastIndex(of: ":") {
                host = entry[..<colon]
                portText = entry[entry.index(after: colon)...]
            } else {
                return .failure(invalid("'\(entry)' has no :port"))
            }
            guard !host.isEmpty, !host.contains(where: { $0 == " " || $0 == "/" || $0 == "@" }) else {
                return .failure(invalid("'\(entry)' has no usable host"))
            }
            guard portText.allSatisfy({ $0.isASCII && $0.isNumber }), let port = Int(portText),
                (1...65_535).contains(port)
            else {
                return .failure(invalid("'\(entry)' needs a port from 1 to 65535"))
            }
            sentinels.append(Sentinel(host: String(host), port: port))
        }
        guard !sentinels.isEmpty else { return .failure(invalid("names no sentinel")) }
        return .success(sentinels)
    }

    private static func invalid(_ message: String) -> RedisError {
        RedisError(.invalidEndpoint, "SIWA_REDIS_SENTINELS \(message) (expected host:port,host:port,...)")
    }

    /// The sentinels, in the order they will be asked next.
    public var sentinels: [Sentinel] { state.withLock { $0.sentinels } }

    /// The primary in use, or nil when none is known (never found, or forgotten after a failure).
    public var current: Primary? { state.withLock { $0.primary } }

    /// How many times the sentinels were asked.
    public var discoveries: Int { state.withLock { $0.discoveries } }

    /// How many discoveries found a primary other than the one found before.
    public var failovers: Int { state.withLock { $0.failovers } }

    /// The primary to connect to: the known one, else a discovery.
    public func primary() throws(RedisError) -> Primary {
        if let known = current { return known }
        return try discovery.withLock { _ throws(RedisError) -> Primary in
            // Another thread may have found it while this one waited.
            if let known = current { return known }
            return try discover()
        }
    }

    /// A connection found `primary` unusable (it failed, timed out, answered READONLY, or
    /// its ROLE is not master): the next connection asks the sentinels again.
    public func forget(_ primary: Primary) {
        state.withLock { state in
            if state.primary == primary { state.primary = nil }
        }
    }

    /// Asks the sentinels now, in order, and remembers the answer.
    @discardableResult
    public func discover() throws(RedisError) -> Primary {
        let order = state.withLock { state in
            state.discoveries += 1
            return state.sentinels
        }
        var unreachable: [String] = []
        var unknownMaster: [Sentinel] = []
        var refusedLogin: [String] = []
        var refusedTLS: [String] = []
        for sentinel in order {
            let connection = RedisConnection(
                endpoint: RedisEndpoint(
                    address: .tcp(host: sentinel.host, port: sentinel.port), password: sentinelPassword,
                    tls: sentinelTLS),
                connectTimeout: timeout, commandTimeout: timeout)
            let reply: RedisReply
            do {
                reply = try connection.command("SENTINEL", "get-master-addr-by-name", masterName)
            } catch {
                if error.code == .tlsRefused {
                    refusedTLS.append("\(sentinel): \(error.message)")
                } else if Self.isLoginRefusal(error) {
                    refusedLogin.append("\(sentinel): \(error.message)")
                } else {
                    unreachable.append("\(sentinel): \(error.message)")
                }
                continue
            }
            guard let pair = reply.array, pair.count == 2, let host = pair[0].string, let portText = pair[1].string,
                let port = Int(portText), (1...65_535).contains(port), !host.isEmpty
            else {
                unknownMaster.append(sentinel)
                continue
            }
            let found = Primary(host: host, port: port)
            state.withLock { state in
                if let index = state.sentinels.firstIndex(of: sentinel), index != 0 {
                    state.sentinels.remove(at: index)
                    state.sentinels.insert(sentinel, at: 0)
                }
                if let previous = state.lastFound, previous != found { state.failovers += 1 }
                state.lastFound = found
                state.primary = found
            }
            return found
        }
        if !refusedTLS.isEmpty {
            throw RedisError(
                .tlsRefused,
                "SIWA_REDIS_SENTINEL_TLS: TLS to the sentinels was refused (\(refusedTLS.joined(separator: "; ")))")
        }
        if !refusedLogin.isEmpty {
            throw RedisError(
                .sentinelLoginRefused,
                "SIWA_REDIS_SENTINEL_PASSWORD: the sentinels refused it ("
                    + "\(refusedLogin.joined(separator: "; ")))")
        }
        if !unknownMaster.isEmpty {
            throw RedisError(
                .sentinelUnknownMaster,
                "SIWA_REDIS_SENTINEL_MASTER: no sentinel monitors a master named '\(masterName)' (asked "
                    + "\(unknownMaster.map(\.description).joined(separator: ", ")))")
        }
        throw RedisError(
            .sentinelUnreachable,
            "SIWA_REDIS_SENTINELS: no sentinel answered (\(unreachable.joined(separator: "; ")))")
    }

    /// A sentinel that wants a password and got none or a wrong one, or got one it does not want.
    private static func isLoginRefusal(_ error: RedisError) -> Bool {
        let text = error.message
        return text.contains("NOAUTH") || text.contains("WRONGPASS") || text.contains("invalid password")
            || text.contains("without any password configured")
    }

    /// The Prometheus lines for the sentinel counters.
    public func metricsText() -> String {
        let (discoveries, failovers) = state.withLock { ($0.discoveries, $0.failovers) }
        return """
            # HELP siwa_redis_sentinel_discoveries_total Times the sentinels were asked for the primary.
            # TYPE siwa_redis_sentinel_discoveries_total counter
            siwa_redis_sentinel_discoveries_total \(discoveries)
            # HELP siwa_redis_failovers_total Discoveries that found a primary other than the previous one.
            # TYPE siwa_redis_failovers_total counter
            siwa_redis_failovers_total \(failovers)

            """
    }
}
