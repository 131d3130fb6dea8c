import COpenSSL
import COpenSSLShim
import Glibc

/// One TLS client connection over a connected stream socket the caller owns (and closes
/// once the stream is released): the handshake, then blocking reads and writes. No close
/// alert is sent at the end: writing one to a peer that has gone would raise SIGPIPE in a
/// process that does not ignore it, and a Redis server needs none.
///
/// Timeouts are the socket's own (`SO_RCVTIMEO`, `SO_SNDTIMEO`), set by the caller: a
/// read or write that hits one throws `timedOut`. Not thread safe: one thread uses a
/// stream at a time. A process using it must ignore SIGPIPE.
public final class TLSStream {
    private let ssl: OpaquePointer
    private let context: TLSClientContext
    /// The server's name and address: where its session is kept for the next connection.
    private let server: String
    private var sessionKept = false
    /// The handshake resumed a session from an earlier connection to the same server.
    public private(set) var resumedSession = false

    /// Connects over `descriptor` and verifies the peer: its certificate must chain to the
    /// context's CAs, be valid now, and name `serverName` (a DNS name, also sent as SNI,
    /// or an IP address, matched against the certificate's IP addresses).
    public init(context: TLSClientContext, descriptor: Int32, serverName: String) throws(TLSError) {
        ERR_clear_error()
        guard let made = SSL_new(context.context) else {
            throw TLSError(.setupFailed, "OpenSSL could not make a TLS connection: \(TLSClientContext.openSSLReason())")
        }
        // From here (every stored property set) a throw runs deinit, which frees it.
        ssl = made
        self.context = context
        server = "\(serverName) \(Self.peerAddress(of: descriptor))"
        guard SSL_set_fd(made, descriptor) == 1 else {
            throw TLSError(.setupFailed, "OpenSSL could not use the socket: \(TLSClientContext.openSSLReason())")
        }
        let named: Bool
        if Self.isIPAddress(serverName) {
            named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(made), serverName) == 1
        } else {
            SSL_set_hostflags(made, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
            named =
                SSL_set1_host(made, serverName) == 1 && siwa_ssl_set_server_name_indication(made, serverName) == 1
        }
        guard named else {
            throw TLSError(.setupFailed, "OpenSSL refused the server name '\(serverName)' to verify")
        }
        if let session = context.resumableSession(for: server) {
            // Refused (a session of another protocol version, say): a full handshake follows.
            _ = SSL_set_session(made, session)
            SSL_SESSION_free(session)
        }
        let result = SSL_connect(made)
        guard result == 1 else {
            let verification = SSL_get_verify_result(made)
            let error: TLSError
            if verification != X509_V_OK {
                let reason = String(cString: X509_verify_cert_error_string(verification))
                error = TLSError(
                    .peerCertificateRefused, "the certificate was refused: \(reason)",
                    verificationResult: Int(verification))
                ERR_clear_error()
            } else {
                error = Self.failure(of: made, result: result, during: "the TLS handshake")
            }
            throw error
        }
        resumedSession = SSL_session_reused(made) == 1
        keepSessionIfResumable()
    }

    deinit { SSL_free(ssl) }

    /// TLS 1.2 gives the session with the handshake; TLS 1.3 in a ticket after it, which
    /// OpenSSL takes in during a read: looked for until one is kept. A copy is kept: freeing
    /// a connection that sent no close alert (see above) marks its own session not resumable.
    private func keepSessionIfResumable() {
        guard !sessionKept, let session = SSL_get_session(ssl), SSL_SESSION_is_resumable(session) == 1,
            let copy = SSL_SESSION_dup(session)
        else { return }
        context.keep(copy, for: server)
        sessionKept = true
    }

    private static func peerAddress(of descriptor: Int32) -> String {
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        var port = [CChar](repeating: 0, count: Int(NI_MAXSERV))
        let named = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                getpeername(descriptor, generic, &length) == 0
                    && getnameinfo(
                        generic, length, &host, socklen_t(host.count), &port, socklen_t(port.count),
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0
            }
        }
        guard named else { return "?" }
        let text = { (bytes: [CChar]) in
            String(decoding: bytes.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return "\(text(host)) \(text(port))"
    }

    /// Writes every byte, or throws.
    public func write(_ bytes: UnsafeRawBufferPointer) throws(TLSError) {
        guard var base = bytes.baseAddress else { return }
        var remaining = bytes.count
        while remaining > 0 {
            ERR_clear_error()
            let written = SSL_write(ssl, base, Int32(min(remaining, Int(Int32.max))))
            guard written > 0 else {
                throw Self.failure(of: ssl, result: written, during: "writing")
            }
            base += Int(written)
            remaining -= Int(written)
        }
    }

    /// Reads what is available, up to the buffer's size (at least one byte), or throws.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> Int {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        ERR_clear_error()
        let count = SSL_read(ssl, base, Int32(min(buffer.count, Int(Int32.max))))
        guard count > 0 else {
            throw Self.failure(of: ssl, result: count, during: "reading")
        }
        keepSessionIfResumable()
        return Int(count)
    }

    private static func failure(of ssl: OpaquePointer, result: Int32, during step: String) -> TLSError {
        let savedErrno = errno
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            ERR_clear_error()
            return TLSError(.timedOut, "the peer did not answer in time (\(step))")
        case SSL_ERROR_ZERO_RETURN:
            ERR_clear_error()
            return TLSError(.closed, "the peer closed the TLS connection (\(step))")
        case SSL_ERROR_SYSCALL:
            let reason = TLSClientContext.openSSLReason()
            if savedErrno == EAGAIN || savedErrno == EWOULDBLOCK {
                return TLSError(.timedOut, "the peer did not answer in time (\(step))")
            }
            if savedErrno == 0 { return TLSError(.closed, "the peer closed the connection (\(step))") }
            return TLSError(
                .ioFailed, "\(step) failed: \(String(cString: strerror(savedErrno))) (\(reason))")
        default:
            let code: TLSError.Code = step == "the TLS handshake" ? .handshakeFailed : .ioFailed
            return TLSError(code, "\(step) failed: \(TLSClientContext.openSSLReason())")
        }
    }

    private static func isIPAddress(_ text: String) -> Bool {
        var storage = in6_addr()
        return inet_pton(AF_INET, text, &storage) == 1 || inet_pton(AF_INET6, text, &storage) == 1
    }
}
