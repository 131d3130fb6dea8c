import CCAres
import Glibc
import SIWASupport

/// Turns a Redis host name into addresses within the connect deadline, with c-ares.
///
/// glibc's `getaddrinfo` blocks for as long as the system's resolver tries (by default 5 s
/// per name server and attempt), whatever the connect timeout says, and offers no call
/// with a deadline that a blocking connection could use without leaving a thread running
/// past it. c-ares sends the same queries from sockets this code polls, so the lookup ends
/// at the deadline: cancelled, its sockets closed, nothing left running.
///
/// What c-ares reads is the system's configuration: `/etc/hosts` and the `nameserver`,
/// `search`, `ndots`, `timeout` and `attempts` lines of `/etc/resolv.conf` (the `hosts:`
/// line of `/etc/nsswitch.conf` orders files and DNS; other NSS modules such as mdns or
/// myhostname are not consulted). An IP literal is never looked up.
public struct RedisHostResolver: Sendable, Equatable {
    /// Name servers to ask instead of `/etc/resolv.conf`'s (`/etc/hosts` is still read
    /// first); nil: the system's. For tests, which point it at a server on loopback.
    public let nameServers: [RedisNodeAddress]?

    /// The system's configuration: what every endpoint uses unless told otherwise.
    public static let system = RedisHostResolver(nameServers: nil)

    public init(nameServers: [RedisNodeAddress]?) {
        self.nameServers = nameServers
    }

    /// One address `host` resolved to, ready for `connect(2)`.
    struct Address {
        let family: Int32
        /// The `sockaddr_in` or `sockaddr_in6`, port included.
        let socketAddress: [UInt8]
    }

    /// Every address of `host` (a name or an IP literal) at `port`, in the order to try
    /// them; throws `.timedOut` at `deadline`, `.unreachable` when the name has none.
    func addresses(of host: String, port: Int, deadline: ContinuousClock.Instant) throws(RedisTransport.Failure)
        -> [Address]
    {
        if let literal = Self.literal(host, port: port) { return [literal] }
        guard Self.libraryReady else {
            throw RedisTransport.Failure(kind: .unreachable, detail: "cannot resolve \(host): c-ares did not start")
        }
        var channel: ares_channel?
        let lookup = Lookup()
        // c-ares tells which sockets to watch through the socket-state callback (ares_getsock,
        // the other way, is deprecated from c-ares 1.34 on); ares_init is deprecated from 1.20.
        var options = ares_options()
        options.sock_state_cb = { context, socket, readable, writable in
            guard let context else { return }
            Unmanaged<Lookup>.fromOpaque(context).takeUnretainedValue()
                .watch(socket, readable: readable != 0, writable: writable != 0)
        }
        options.sock_state_cb_data = Unmanaged.passUnretained(lookup).toOpaque()
        let initialised = ares_init_options(&channel, &options, ARES_OPT_SOCK_STATE_CB)
        guard initialised == CCAres_success, let channel else {
            throw RedisTransport.Failure(
                kind: .unreachable, detail: "cannot resolve \(host): \(Self.text(of: initialised))")
        }
        // ares_destroy calls back a lookup still under way (ARES_EDESTRUCTION): it must outlive it.
        defer { withExtendedLifetime(lookup) { ares_destroy(channel) } }
        if let nameServers {
            let list = nameServers.map { $0.host.contains(":") ? "[\($0.host)]:\($0.port)" : "\($0.host):\($0.port)" }
            let set = ares_set_servers_ports_csv(channel, list.joined(separator: ","))
            guard set == CCAres_success else {
                throw RedisTransport.Failure(
                    kind: .unreachable, detail: "cannot resolve \(host): name servers refused: \(Self.text(of: set))")
            }
        }
        var hints = ares_addrinfo_hints()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        // The callback runs inside this call (an /etc/hosts answer) or inside ares_process_fd.
        ares_getaddrinfo(
            channel, host, String(port), &hints,
            { context, status, _, result in
                guard let context else { return }
                Unmanaged<Lookup>.fromOpaque(context).takeUnretainedValue().finish(status, result)
            }, Unmanaged.passUnretained(lookup).toOpaque())
        Self.run(channel, watching: lookup, deadline: deadline)
        guard let status = lookup.status else {
            // The deadline: ares_destroy (deferred) cancels the query and closes its sockets.
            throw RedisTransport.Failure(kind: .timedOut, detail: "resolving \(host) took longer than the timeout")
        }
        guard status == CCAres_success else {
            throw RedisTransport.Failure(kind: .unreachable, detail: "cannot resolve \(host): \(Self.text(of: status))")
        }
        guard !lookup.addresses.isEmpty else {
            throw RedisTransport.Failure(kind: .unreachable, detail: "\(host) resolves to no address")
        }
        return lookup.addresses
    }

    // MARK: - c-ares

    /// The callback's side: written once, on this thread (c-ares calls back from the calls
    /// made here only).
    private final class Lookup {
        var status: Int32?
        var addresses: [Address] = []
        /// The sockets c-ares wants watched, with what for (its socket-state callback).
        var watched: [ares_socket_t: (readable: Bool, writable: Bool)] = [:]

        func watch(_ socket: ares_socket_t, readable: Bool, writable: Bool) {
            watched[socket] = readable || writable ? (readable, writable) : nil
        }

        func finish(_ status: Int32, _ result: UnsafeMutablePointer<ares_addrinfo>?) {
            self.status = status
            guard let result else { return }
            defer { ares_freeaddrinfo(result) }
            var node = result.pointee.nodes
            while let current = node {
                node = current.pointee.ai_next
                guard let address = current.pointee.ai_addr else { continue }
                let bytes = UnsafeRawBufferPointer(start: address, count: Int(current.pointee.ai_addrlen))
                addresses.append(Address(family: current.pointee.ai_family, socketAddress: Array(bytes)))
            }
        }
    }

    /// `ares_library_init` once per process, before the first channel.
    private static let libraryReady: Bool = ares_library_init(ARES_LIB_INIT_ALL) == CCAres_success

    /// Polls the sockets c-ares asked to be watched and hands what is ready (or a retry that
    /// is due) to c-ares until the lookup finishes or `deadline`. Every wait is bounded by both
    /// c-ares' next retry and the deadline.
    private static func run(_ channel: ares_channel, watching lookup: Lookup, deadline: ContinuousClock.Instant) {
        while lookup.status == nil {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else { return }
            var polled = lookup.watched.map { socket, wanted in
                pollfd(
                    fd: socket,
                    events: Int16((wanted.readable ? POLLIN : 0) | (wanted.writable ? POLLOUT : 0)), revents: 0)
            }
            var longest = remaining.timeValue
            var next = timeval()
            // c-ares' next retry, or the deadline when that comes first (ares_timeout returns one of the two).
            let due = ares_timeout(channel, &longest, &next)
            let wait = due.map { .seconds($0.pointee.tv_sec) + .microseconds($0.pointee.tv_usec) } ?? remaining
            // At least a millisecond: poll's 0 would spin until c-ares' retry is due.
            let milliseconds = Int32(clamping: max(1, min(wait, remaining).wholeMilliseconds))
            let ready = poll(&polled, nfds_t(polled.count), milliseconds)
            if ready < 0 && errno == EINTR { continue }
            var handed = false
            for entry in polled where entry.revents != 0 {
                let readEvents = Int16(POLLIN) | Int16(POLLERR) | Int16(POLLHUP)
                ares_process_fd(
                    channel, entry.revents & readEvents != 0 ? entry.fd : ARES_SOCKET_BAD,
                    entry.revents & Int16(POLLOUT) != 0 ? entry.fd : ARES_SOCKET_BAD)
                handed = true
            }
            // Nothing to read: c-ares sends its retries (and gives up) when asked with no socket.
            if !handed { ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD) }
        }
    }

    /// An IPv4 or IPv6 literal as a socket address; nil for a name.
    private static func literal(_ host: String, port: Int) -> Address? {
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
            return Address(family: AF_INET, socketAddress: withUnsafeBytes(of: &v4) { Array($0) })
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
            return Address(family: AF_INET6, socketAddress: withUnsafeBytes(of: &v6) { Array($0) })
        }
        return nil
    }

    private static func text(of status: Int32) -> String {
        ares_strerror(status).map { String(cString: $0) } ?? "c-ares error \(status)"
    }
}
