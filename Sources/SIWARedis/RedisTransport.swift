// ares.h includes <sys/socket.h>: in a whole-module (release) build the socket constants
// (SOCK_STREAM, SOCK_CLOEXEC...) are then seen through CCAres, not Glibc, in this module.
import CCAres
import CHiredis
import Glibc
import SIWASupport
import SIWATLS

/// The byte stream under a `RedisConnection`, opened by this class: a TCP or unix socket,
/// TLS over it when the endpoint asks for it, and hiredis used only to parse replies (a
/// `redisReader`); commands are written by `RedisCommandEncoding`.
/// One code path whatever hiredis version is installed: hiredis never owns the socket.
///
/// Timeouts are the socket's (`SO_RCVTIMEO`, `SO_SNDTIMEO`): the connect timeout while
/// connecting and during the TLS handshake, the command timeout after.
/// NOT thread safe (one per connection). Writes may meet a closed peer: ignore SIGPIPE.
final class RedisTransport {
    /// Why the stream failed, in words for the log, with the kind the connection maps to a code.
    struct Failure: Error {
        enum Kind {
            /// Resolving or connecting failed (refused, no route, a bad socket path).
            case unreachable
            /// Connecting, the handshake or a reply took longer than its timeout.
            case timedOut
            /// TLS cannot work as set: the server's certificate refused, or a TLS file unusable.
            case tlsRefused
            /// The peer closed the connection.
            case closed
            /// Reading or writing failed.
            case inputOutput
            /// The bytes read are not RESP.
            case protocolViolation
        }

        let kind: Kind
        let detail: String
        /// The configured thing a TLS refusal is about (an unusable TLS file), when one is.
        var field: RedisError.Field? = nil
        /// What a refused server certificate had to satisfy.
        var certificateRefusal: RedisError.CertificateRefusal? = nil

        /// The hiredis error code that names the same failure, kept as the error's cause.
        var hiredisCode: Int32 {
            switch kind {
            case .closed: REDIS_ERR_EOF
            case .protocolViolation: REDIS_ERR_PROTOCOL
            case .timedOut, .unreachable, .tlsRefused, .inputOutput: REDIS_ERR_IO
            }
        }
    }

    private let descriptor: Int32
    private let tls: TLSStream?
    private let reader: UnsafeMutablePointer<redisReader>
    private var readBuffer = [UInt8](repeating: 0, count: 16 * 1024)
    /// The command being sent, kept between commands so its storage is reused.
    private var commandBuffer: [UInt8] = []
    /// A command larger than this (an EVAL carrying a script) does not leave its storage
    /// held for the connection's life.
    private static let keptCommandCapacity = 16 * 1024

    private init(descriptor: Int32, tls: TLSStream?, reader: UnsafeMutablePointer<redisReader>) {
        self.descriptor = descriptor
        self.tls = tls
        self.reader = reader
    }

    deinit {
        Glibc.close(descriptor)
        redisReaderFree(reader)
    }

    /// Connects to `address` within `connectTimeout` (resolving a host name with `resolver`,
    /// then every address it resolves to, in order, all sharing that time), then makes the
    /// TLS handshake when `tls` is set.
    static func open(
        _ address: RedisEndpoint.Address, tls: RedisTLS?, resolver: RedisHostResolver = .system,
        connectTimeout: Duration, commandTimeout: Duration
    ) throws(Failure) -> RedisTransport {
        let deadline = ContinuousClock.now + connectTimeout
        let descriptor: Int32
        switch address {
        case .tcp(let host, let port):
            descriptor = try connectTCP(host: host, port: port, resolver: resolver, deadline: deadline)
        case .unixSocket(let path): descriptor = try connectUnix(path: path, deadline: deadline)
        }
        var stream: TLSStream?
        do throws(Failure) {
            if let tls {
                guard case .tcp(let host, _) = address else {
                    throw Failure(kind: .unreachable, detail: "TLS is offered over TCP only")
                }
                let context: TLSClientContext
                do throws(RedisError) {
                    context = try tls.context()
                } catch {
                    throw Failure(kind: .tlsRefused, detail: error.message, field: error.field)
                }
                try setTimeouts(descriptor, max(deadline - ContinuousClock.now, .milliseconds(1)))
                stream = try handshake(context, descriptor, serverName: tls.serverName ?? host, namedBy: tls)
            }
            try setTimeouts(descriptor, commandTimeout)
        } catch {
            Glibc.close(descriptor)
            throw error
        }
        guard let reader = redisReaderCreate() else {
            Glibc.close(descriptor)
            throw Failure(kind: .inputOutput, detail: "could not allocate a reply reader")
        }
        return RedisTransport(descriptor: descriptor, tls: stream, reader: reader)
    }

    /// Sends one command and reads its one reply.
    func roundTrip(_ arguments: [[UInt8]]) throws(Failure) -> RedisReply {
        commandBuffer.removeAll(keepingCapacity: commandBuffer.capacity <= Self.keptCommandCapacity)
        RedisCommandEncoding.append(arguments, to: &commandBuffer)
        // Array's closures rethrow untyped errors: the outcome comes back as a value.
        try commandBuffer.withUnsafeBytes { bytes in Result { () throws(Failure) in try write(bytes) } }.get()
        return try nextReply()
    }

    /// Reads the next whole reply: the answer to a command sent, or one the server pushes
    /// unasked (a pub/sub message after `SUBSCRIBE`). Waits at most the command timeout.
    func nextReply() throws(Failure) -> RedisReply {
        while true {
            var replyPointer: UnsafeMutableRawPointer?
            guard redisReaderGetReply(reader, &replyPointer) == REDIS_OK else {
                let detail = withUnsafeBytes(of: reader.pointee.errstr) { buffer in
                    String(decoding: buffer.prefix(while: { $0 != 0 }), as: UTF8.self)
                }
                throw Failure(kind: .protocolViolation, detail: detail.isEmpty ? "protocol error" : detail)
            }
            if let replyPointer {
                let reply = Self.convert(replyPointer.assumingMemoryBound(to: redisReply.self))
                freeReplyObject(replyPointer)
                return reply
            }
            let count = try readBuffer.withUnsafeMutableBytes { buffer in
                Result { () throws(Failure) in try read(into: buffer) }
            }.get()
            let fed = readBuffer.withUnsafeBytes { buffer in
                redisReaderFeed(reader, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), count)
            }
            guard fed == REDIS_OK else { throw Failure(kind: .protocolViolation, detail: "the reply reader is full") }
        }
    }

    // MARK: - Bytes

    private func write(_ bytes: UnsafeRawBufferPointer) throws(Failure) {
        if let tls {
            do throws(TLSError) {
                try tls.write(bytes)
            } catch {
                throw Self.failure(error)
            }
            return
        }
        guard var next = bytes.baseAddress else { return }
        var remaining = bytes.count
        while remaining > 0 {
            // MSG_NOSIGNAL: a closed peer is an error here, not a SIGPIPE.
            let written = Glibc.send(descriptor, next, remaining, Int32(MSG_NOSIGNAL))
            if written < 0 {
                if errno == EINTR { continue }
                throw Self.socketFailure(errno)
            }
            next += written
            remaining -= written
        }
    }

    private func read(into buffer: UnsafeMutableRawBufferPointer) throws(Failure) -> Int {
        if let tls {
            do throws(TLSError) {
                return try tls.read(into: buffer)
            } catch {
                throw Self.failure(error)
            }
        }
        while true {
            let count = Glibc.read(descriptor, buffer.baseAddress, buffer.count)
            if count > 0 { return count }
            if count == 0 { throw Failure(kind: .closed, detail: "Server closed the connection") }
            if errno == EINTR { continue }
            throw Self.socketFailure(errno)
        }
    }

    private static func socketFailure(_ number: Int32) -> Failure {
        let text = String(cString: strerror(number))
        return Failure(kind: number == EAGAIN || number == EWOULDBLOCK ? .timedOut : .inputOutput, detail: text)
    }

    private static func failure(_ error: TLSError) -> Failure {
        let kind: Failure.Kind =
            switch error.code {
            case .timedOut: .timedOut
            case .closed: .closed
            default: .inputOutput
            }
        return Failure(kind: kind, detail: "TLS: \(error.message)")
    }

    // MARK: - Connecting

    private static func connectTCP(
        host: String, port: Int, resolver: RedisHostResolver, deadline: ContinuousClock.Instant
    ) throws(Failure) -> Int32 {
        let addresses = try resolver.addresses(of: host, port: port, deadline: deadline)
        var lastFailure = Failure(kind: .unreachable, detail: "\(host) resolves to no address")
        for address in addresses {
            do throws(Failure) {
                // Array's closures rethrow untyped errors: the outcome comes back as a value.
                let descriptor = try address.socketAddress.withUnsafeBytes { bytes in
                    Result { () throws(Failure) in
                        try connectSocket(
                            family: address.family, address: bytes.baseAddress!.assumingMemoryBound(to: sockaddr.self),
                            length: socklen_t(bytes.count), deadline: deadline)
                    }
                }.get()
                var on: Int32 = 1
                _ = setsockopt(
                    descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
                return descriptor
            } catch {
                lastFailure = error
                if error.kind == .timedOut { break }
            }
        }
        throw lastFailure
    }

    private static func connectUnix(path: String, deadline: ContinuousClock.Instant) throws(Failure) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard pathBytes.count < capacity else {
            throw Failure(kind: .unreachable, detail: "the socket path is longer than \(capacity - 1) bytes")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: pathBytes)
            buffer[pathBytes.count] = 0
        }
        return try withUnsafePointer(to: &address) { pointer throws(Failure) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic throws(Failure) in
                try connectSocket(
                    family: AF_UNIX, address: generic, length: socklen_t(MemoryLayout<sockaddr_un>.size),
                    deadline: deadline)
            }
        }
    }

    /// A non-blocking connect awaited with poll until `deadline`, then a blocking socket.
    private static func connectSocket(
        family: Int32, address: UnsafePointer<sockaddr>, length: socklen_t, deadline: ContinuousClock.Instant
    ) throws(Failure) -> Int32 {
        let descriptor = socket(
            family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard descriptor >= 0 else { throw socketFailure(errno) }
        if Glibc.connect(descriptor, address, length) != 0 {
            guard errno == EINPROGRESS || errno == EINTR else {
                let failure = Failure(kind: .unreachable, detail: String(cString: strerror(errno)))
                Glibc.close(descriptor)
                throw failure
            }
            var ready: Int32 = 0
            repeat {
                let remaining = deadline - ContinuousClock.now
                let milliseconds =
                    remaining <= .zero ? 0 : Int32(min(remaining / .milliseconds(1), 600_000).rounded(.up))
                var poller = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
                ready = poll(&poller, 1, milliseconds)
            } while ready < 0 && errno == EINTR && ContinuousClock.now < deadline
            guard ready > 0 else {
                Glibc.close(descriptor)
                throw Failure(kind: .timedOut, detail: String(cString: strerror(ETIMEDOUT)))
            }
            var problem: Int32 = 0
            var problemLength = socklen_t(MemoryLayout<Int32>.size)
            _ = getsockopt(descriptor, SOL_SOCKET, SO_ERROR, &problem, &problemLength)
            guard problem == 0 else {
                Glibc.close(descriptor)
                throw Failure(kind: .unreachable, detail: String(cString: strerror(problem)))
            }
        }
        let flags = fcntl(descriptor, F_GETFL)
        _ = fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK)
        return descriptor
    }

    private static func setTimeouts(_ descriptor: Int32, _ timeout: Duration) throws(Failure) {
        var value = timeout.timeValue
        let size = socklen_t(MemoryLayout<timeval>.size)
        guard setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &value, size) == 0,
            setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &value, size) == 0
        else { throw socketFailure(errno) }
    }

    private static func handshake(
        _ context: TLSClientContext, _ descriptor: Int32, serverName: String, namedBy tls: RedisTLS
    ) throws(Failure) -> TLSStream {
        do throws(TLSError) {
            return try TLSStream(context: context, descriptor: descriptor, serverName: serverName)
        } catch  where error.code == .peerCertificateRefused {
            throw Failure(
                kind: .tlsRefused, detail: "TLS: \(error.message)",
                certificateRefusal: RedisError.CertificateRefusal(
                    trust: tls.caFile == nil ? nil : .tlsCAFile, serverName: serverName,
                    nameSource: tls.serverName == nil ? .url : .tlsServerName))
        } catch {
            throw failure(error)
        }
    }

    // MARK: - Replies

    private static func convert(_ pointer: UnsafeMutablePointer<redisReply>) -> RedisReply {
        let reply = pointer.pointee
        func bytes() -> [UInt8] {
            guard let text = reply.str, reply.len > 0 else { return [] }
            return Array(UnsafeRawBufferPointer(start: text, count: reply.len))
        }
        switch reply.type {
        case REDIS_REPLY_STATUS: return .status(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_ERROR: return .error(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_INTEGER: return .integer(Int64(reply.integer))
        case REDIS_REPLY_STRING: return .bulkString(bytes())
        case REDIS_REPLY_ARRAY:
            guard let elements = reply.element else { return .array([]) }
            return .array((0..<reply.elements).compactMap { index in elements[index].map(convert) })
        default: return .null
        }
    }
}
