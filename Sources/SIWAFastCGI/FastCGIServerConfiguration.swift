import Foundation

/// The FastCGI server's settings, validated by `validate()` before anything is opened.
///
/// The defaults and bounds below are the ones of the settings table (`SIWA_WORKERS`,
/// `SIWA_MAX_BODY_BYTES`, `SIWA_FCGI_BACKLOG`, `SIWA_SHUTDOWN_TIMEOUT_SECONDS`): its rows read
/// them from here, so a value the table accepts is one `validate()` accepts.
public struct FastCGIServerConfiguration: Sendable, Equatable {
    /// Two workers per core, since a request mostly waits on Redis rather than the CPU.
    public static var defaultWorkerCount: Int { 2 * ProcessInfo.processInfo.activeProcessorCount }
    public static let workerCountRange = 1...256
    /// Apple's notifications are a few KiB; 64 KiB leaves room without inviting abuse.
    public static let defaultMaximumBodyBytes = 64 * 1024
    /// At most 128 KiB: a request waits unread in the kernel until it is whole (the acceptor
    /// peeks), and a unix socket holds about 200 KiB unread from a sender with Linux's
    /// default buffer (`net.core.wmem_default`), the parameters and records included.
    public static let maximumBodyBytesRange = 1024...(128 * 1024)
    public static let defaultBacklog = 1024
    public static let backlogRange = 16...65_535
    public static let defaultShutdownTimeout: Duration = .seconds(10)
    /// The shutdown timeouts the settings accept: a second to five minutes (`validate()`
    /// asks only for a positive one: an embedding program may drain for less).
    public static let shutdownTimeoutRange: ClosedRange<Duration> = .seconds(1) ... .seconds(300)

    /// Where to listen; see `FastCGIListenAddress` (loopback only for TCP).
    public var address: FastCGIListenAddress
    /// Worker threads, each serving one request (or one kept nginx connection) at a time.
    public var workerCount: Int
    /// Bodies larger than this are answered from `FastCGIRequest.Body.tooLarge` unread: the
    /// one place the body limit is enforced.
    public var maximumBodyBytes: Int
    /// listen(2) backlog: connections nginx may queue while every worker is busy (the
    /// responder itself holds at most four whole requests per worker, at least 16, beyond
    /// those served; connections still sending theirs are held up to the descriptor limit).
    public var backlog: Int32
    /// The one deadline of a request, from its connection's accept (or the first byte of a
    /// kept connection's next request), for its parameters and body together; also how
    /// long a kept connection waits idle for its next request, and the timeout of each
    /// read and write on the connection.
    public var ioTimeout: Duration
    /// How long `run()` waits, after SIGTERM/SIGINT, for requests in flight to finish.
    public var shutdownTimeout: Duration

    public init(
        address: FastCGIListenAddress,
        workerCount: Int = defaultWorkerCount,
        maximumBodyBytes: Int = defaultMaximumBodyBytes,
        backlog: Int32 = Int32(defaultBacklog),
        ioTimeout: Duration = .seconds(30),
        shutdownTimeout: Duration = defaultShutdownTimeout
    ) {
        self.address = address
        self.workerCount = workerCount
        self.maximumBodyBytes = maximumBodyBytes
        self.backlog = backlog
        self.ioTimeout = ioTimeout
        self.shutdownTimeout = shutdownTimeout
    }

    /// Throws `invalidSetting` naming the first setting out of range.
    public func validate() throws(FastCGIError) {
        guard Self.workerCountRange.contains(workerCount) else {
            throw FastCGIError(.invalidSetting, "workerCount must be \(Self.workerCountRange)")
        }
        guard Self.maximumBodyBytesRange.contains(maximumBodyBytes) else {
            throw FastCGIError(.invalidSetting, "maximumBodyBytes must be \(Self.maximumBodyBytesRange)")
        }
        guard Self.backlogRange.contains(Int(backlog)) else {
            throw FastCGIError(.invalidSetting, "backlog must be \(Self.backlogRange)")
        }
        guard ioTimeout > .zero, shutdownTimeout > .zero else {
            throw FastCGIError(.invalidSetting, "ioTimeout and shutdownTimeout must be positive")
        }
        switch address {
        case .unixSocket(let path, let mode, let group):
            guard path.hasPrefix("/"), path.utf8.count < 108, !path.contains("\0") else {
                throw FastCGIError(.invalidSetting, "unix socket path must be absolute and under 108 bytes")
            }
            guard mode & ~0o777 == 0 else {
                throw FastCGIError(.invalidSetting, "unix socket mode must be within 0o777")
            }
            if let group, group.isEmpty || group.contains("\0") {
                throw FastCGIError(.invalidSetting, "unix socket group must be a non-empty name")
            }
        case .loopbackTCP(let host, _):
            guard FastCGIListenAddress.isLoopback(host) else {
                throw FastCGIError(.nonLoopbackHost, "TCP listen host must be in 127.0.0.0/8 or ::1")
            }
        }
    }
}
