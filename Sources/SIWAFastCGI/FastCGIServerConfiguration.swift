import Foundation

/// The FastCGI server's settings, validated by `validate()` before anything is opened.
public struct FastCGIServerConfiguration: Sendable, Equatable {
    /// Where to listen; see `FastCGIListenAddress` (loopback only for TCP).
    public var address: FastCGIListenAddress
    /// Worker threads, each serving one request (or one kept nginx connection) at a time.
    /// Default: two per core, since a request mostly waits on Redis rather than the CPU.
    public var workerCount: Int
    /// Bodies larger than this are answered from `FastCGIRequest.Body.tooLarge` unread.
    /// Apple's notifications are a few KiB; 64 KiB leaves room without inviting abuse.
    public var maximumBodyBytes: Int
    /// listen(2) backlog: connections nginx may queue while every worker is busy (the
    /// responder itself holds at most four per worker, at least 16, beyond those served).
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
        workerCount: Int = 2 * ProcessInfo.processInfo.activeProcessorCount,
        maximumBodyBytes: Int = 64 * 1024,
        backlog: Int32 = 128,
        ioTimeout: Duration = .seconds(30),
        shutdownTimeout: Duration = .seconds(10)
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
        guard (1...1024).contains(workerCount) else {
            throw FastCGIError(.invalidSetting, "workerCount must be 1...1024")
        }
        guard (1...(64 * 1024 * 1024)).contains(maximumBodyBytes) else {
            throw FastCGIError(.invalidSetting, "maximumBodyBytes must be 1...67108864")
        }
        guard (1...65535).contains(backlog) else {
            throw FastCGIError(.invalidSetting, "backlog must be 1...65535")
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
