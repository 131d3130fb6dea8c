import Glibc
import SIWASupport

/// The listening socket, created and bound here rather than by `FCGX_OpenSocket`, so that
/// a TCP socket is bound to loopback only (libfcgi's ":PORT" binds every interface) and a
/// unix socket has its mode and group before it accepts a single connection.
final class FastCGIListener: Sendable {
    let fileDescriptor: Int32
    /// The bound TCP port (useful when the configuration asked for port 0), else nil.
    let boundPort: UInt16?
    /// The TCP socket's own address ("127.0.0.1:PORT"), nil for a unix socket.
    var boundAddress: String? { boundPort == nil ? nil : SocketAddress.boundAddress(of: fileDescriptor) }
    private let socketPath: String?
    private let socketIdentity: (device: UInt64, inode: UInt64)?

    /// `receiveBuffer`: the bytes a TCP connection's receive buffer must hold unread (set on
    /// the listening socket, so every accepted connection has it; a unix socket's unread
    /// bytes are bounded by the sender's buffer instead).
    init(address: FastCGIListenAddress, backlog: Int32, receiveBuffer: Int = 0) throws(FastCGIError) {
        switch address {
        case .unixSocket(let path, let mode, let group):
            let groupID = try group.map { name throws(FastCGIError) in try Self.groupID(named: name) }
            try Self.removeStaleSocket(at: path)
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw .system(.listenFailed, "socket", errno: errno) }
            do throws(FastCGIError) {
                try Self.bindUnix(fd, path: path)
                // Before listen(2): nobody can connect yet, so the umask's mode is never seen.
                guard chmod(path, mode_t(mode)) == 0 else {
                    throw FastCGIError.system(.listenFailed, "chmod", errno: errno)
                }
                if let groupID, chown(path, uid_t.max, groupID) != 0 {
                    throw FastCGIError.system(.listenFailed, "chown", errno: errno)
                }
                guard listen(fd, backlog) == 0 else { throw FastCGIError.system(.listenFailed, "listen", errno: errno) }
            } catch {
                Glibc.close(fd)
                unlink(path)
                throw error
            }
            var info = stat()
            lstat(path, &info)
            fileDescriptor = fd
            boundPort = nil
            socketPath = path
            socketIdentity = (UInt64(info.st_dev), UInt64(info.st_ino))
        case .loopbackTCP(let host, let port):
            guard FastCGIListenAddress.isLoopback(host) else {
                throw FastCGIError(.nonLoopbackHost, "TCP listen host must be in 127.0.0.0/8 or ::1")
            }
            (fileDescriptor, boundPort) = try Self.bindLoopback(
                host: host, port: port, backlog: backlog, receiveBuffer: receiveBuffer)
            socketPath = nil
            socketIdentity = nil
        }
    }

    /// A TCP socket bound to exactly `host` (never the wildcard address), listening.
    private static func bindLoopback(
        host: String, port: UInt16, backlog: Int32, receiveBuffer: Int
    ) throws(FastCGIError) -> (Int32, UInt16) {
        let address: SocketAddress
        do throws(SocketAddress.Invalid) {
            address = try SocketAddress.internet(host: host, port: port)
        } catch {
            throw FastCGIError(.invalidListenAddress, "TCP listen host is not an IP address")
        }
        let fd = address.makeStreamSocket()
        guard fd >= 0 else { throw .system(.listenFailed, "socket", errno: errno) }
        do throws(FastCGIError) {
            var on: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
            // Before listen(2), so the window scale offered covers it. The kernel doubles the
            // value for its own bookkeeping; a value above net.core.rmem_max is capped there.
            var size = Int32(clamping: receiveBuffer)
            if size > 0 { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
            if address.family == AF_INET6 {
                setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &on, socklen_t(MemoryLayout<Int32>.size))
            }
            guard address.bind(fd) == 0 else { throw FastCGIError.system(.listenFailed, "bind", errno: errno) }
            guard listen(fd, backlog) == 0 else { throw FastCGIError.system(.listenFailed, "listen", errno: errno) }
            guard let boundPort = SocketAddress.boundPort(of: fd) else {
                throw FastCGIError.system(.listenFailed, "getsockname", errno: errno)
            }
            return (fd, boundPort)
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    /// Wakes every thread blocked in accept(2) on this socket (Linux returns EINVAL to
    /// them) without closing the descriptor, whose number another thread could reuse
    /// while a worker still holds it.
    func stopAccepting() {
        shutdown(fileDescriptor, Int32(SHUT_RDWR))
    }

    /// Closes the socket and removes the socket file, but only if it is still ours: a new
    /// instance may already have replaced it during a rolling restart.
    func closeAndRemove() {
        _ = Glibc.close(fileDescriptor)
        guard let socketPath, let socketIdentity else { return }
        var info = stat()
        if lstat(socketPath, &info) == 0, UInt64(info.st_dev) == socketIdentity.device,
            UInt64(info.st_ino) == socketIdentity.inode
        {
            unlink(socketPath)
        }
    }

    /// A leftover socket file from a previous run is removed; any other kind of file is
    /// refused, so a mistyped path cannot delete data.
    private static func removeStaleSocket(at path: String) throws(FastCGIError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw FastCGIError(.listenFailed, "unix socket path exists and is not a socket")
        }
        guard unlink(path) == 0 else { throw .system(.listenFailed, "unlink stale socket", errno: errno) }
    }

    private static func bindUnix(_ fd: Int32, path: String) throws(FastCGIError) {
        let address: SocketAddress
        do throws(SocketAddress.Invalid) {
            address = try SocketAddress.unixSocket(path: path)
        } catch {
            throw FastCGIError(.invalidListenAddress, "unix socket path is too long")
        }
        guard address.bind(fd) == 0 else { throw .system(.listenFailed, "bind", errno: errno) }
    }

    private static func groupID(named name: String) throws(FastCGIError) -> gid_t {
        var group = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        let status = getgrnam_r(name, &group, &buffer, buffer.count, &result)
        guard status == 0, let result else {
            throw FastCGIError(.unknownGroup, "unix socket group does not exist")
        }
        return result.pointee.gr_gid
    }
}
