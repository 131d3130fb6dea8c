import CFastCGI
import Glibc
import SIWASupport

/// One worker thread's libfcgi loop: its own `FCGX_Request`, accept, read, call the
/// handler, write, finish. Every libfcgi pointer of the server lives in this file.
// Unchecked: it owns a libfcgi `FCGX_Request` pointer, which only its own thread (`run()`) touches.
final class FastCGIWorker: @unchecked Sendable {
    private let request: UnsafeMutablePointer<FCGX_Request>
    private let maximumBodyBytes: Int
    private let ioTimeout: Duration
    private let acceptor: FastCGIAcceptor
    private let handler: @Sendable (FastCGIRequest) -> FastCGIResponse

    /// Connections come from `acceptor`, each with its whole request waiting; libfcgi
    /// never accepts by itself (its listening socket is -1), so it never reads a
    /// connection that could keep it waiting without a timeout.
    init(
        acceptor: FastCGIAcceptor,
        maximumBodyBytes: Int,
        ioTimeout: Duration,
        handler: @escaping @Sendable (FastCGIRequest) -> FastCGIResponse
    ) throws(FastCGIError) {
        request = .allocate(capacity: 1)
        guard FCGX_InitRequest(request, -1, 0) == 0 else {
            request.deallocate()
            throw FastCGIError(.libraryFailed, "FCGX_InitRequest failed")
        }
        self.acceptor = acceptor
        self.maximumBodyBytes = maximumBodyBytes
        self.ioTimeout = ioTimeout
        self.handler = handler
    }

    /// Serves until the server stops and no accepted request is left; then frees the request.
    func run() {
        defer {
            FCGX_Free(request, 1)
            request.deallocate()
        }
        // Where this worker peeks at a connection it accepts: made once.
        var peekBuffer = [UInt8](repeating: 0, count: acceptor.window)
        while let handed = acceptor.next(buffer: &peekBuffer) {
            // Non-blocking since its accept (`FastCGIAcceptor`): every byte read below is
            // already in the socket, and a read of one that is not there fails at once
            // (the body counts as incomplete) instead of waiting for the peer.
            request.pointee.ipcFd = handed.fd
            // Any close libfcgi makes itself (after a failed write) is a plain close, never its
            // lingering one (shutdown, then select and read for as long as bytes keep coming
            // within 2 s): a peer that stopped reading and trickles held the worker.
            request.pointee.detached = 1
            // So that the finish inside FCGX_Accept_r keeps (does not close) this connection.
            request.pointee.keepConnection = 1
            // Reads the begin record and the parameters, already waiting in the socket. On a
            // protocol error libfcgi closes the connection and, with no listening socket,
            // returns a negative status instead of accepting another.
            guard FCGX_Accept_r(request) >= 0 else { continue }
            serveAcceptedRequest(parameters: handed.parameters)
        }
    }

    /// `parameters` are the acceptor's reading of the request, the one that judged it
    /// ready: libfcgi's own copies (`envp`) are never looked at.
    private func serveAcceptedRequest(parameters: FastCGIParameters) {
        let peerKeepsConnection = request.pointee.keepConnection != 0
        let body = readBody(declaredLength: parameters.contentLength)
        let response = handler(FastCGIRequest(parameters: parameters, body: body))
        let bytes = response.serialized()
        let blocking = bytes.count > Self.nonBlockingAnswerBytes
        if blocking { makeBlockingForWrite(request.pointee.ipcFd) }
        bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return }
            base.withMemoryRebound(to: CChar.self, capacity: buffer.count) { pointer in
                // A failed write means the peer left; there is no one left to tell.
                _ = FCGX_PutStr(pointer, Int32(buffer.count), request.pointee.out)
            }
        }
        let bodyWasReadToItsEnd = { if case .complete = body { true } else { false } }()
        finish(
            keeping: peerKeepsConnection && bodyWasReadToItsEnd, bodyWasReadToItsEnd: bodyWasReadToItsEnd,
            madeBlocking: blocking)
    }

    /// Answers of at most this many bytes (with libfcgi's records around them, well under
    /// the smallest send buffer a socket has) are written to the non-blocking connection:
    /// its send buffer is empty (a new connection, or a kept one whose last answer the peer
    /// has read: the acceptor checks), so the write never waits and needs no timeout.
    static let nonBlockingAnswerBytes = 2048

    /// A larger answer (`/metrics`, say) may fill the send buffer: it is written blocking,
    /// each write bounded by `ioTimeout` (a peer that stops reading holds the worker no longer).
    private func makeBlockingForWrite(_ fd: Int32) {
        guard fd >= 0 else { return }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        var value = ioTimeout.timeValue
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Ends the request without libfcgi's own close, which lingers (`shutdown`, then
    /// `select` and `read` for as long as input keeps arriving within 2 s of the last):
    /// a peer sending a byte a second held the worker for as long as it liked. Instead:
    /// - a connection the peer keeps (nginx's `fastcgi_keep_conn`), its body read to the
    ///   end, goes back to the acceptor to wait for its next request;
    /// - one whose body was read to its end (through the empty STDIN record, after which
    ///   nginx sends nothing more on a connection it does not keep) is closed at once:
    ///   nothing unread can draw a reset that would discard the answer;
    /// - one with input left unread (a body over the limit, or cut short) has its writing
    ///   side shut, so the answer is complete, and is drained by the acceptor (bounded in
    ///   bytes and time), then closed: never by this worker.
    private func finish(keeping: Bool, bodyWasReadToItsEnd: Bool, madeBlocking: Bool) {
        request.pointee.keepConnection = 1
        // An input error would make libfcgi close (and linger) even so.
        FCGX_ClearError(request.pointee.in)
        FCGX_Finish_r(request)
        // libfcgi closed it anyway after a failed write (the peer left); else it is open here.
        guard request.pointee.ipcFd >= 0 else { return }
        let fd = request.pointee.ipcFd
        request.pointee.ipcFd = -1
        if keeping {
            // Its next request is read non-blocking again, as every handed connection is.
            if madeBlocking { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
            acceptor.watchAgain(fd)
        } else if bodyWasReadToItsEnd {
            Glibc.close(fd)
        } else {
            shutdown(fd, Int32(SHUT_WR))
            acceptor.drainAndClose(fd)
        }
    }

    /// Reads at most `maximumBodyBytes + 1` bytes: one byte past the limit is proof enough.
    /// `declared` is nil when `CONTENT_LENGTH` is absent or empty: the acceptor refused any
    /// other value that is not a number.
    private func readBody(declaredLength declared: Int?) -> FastCGIRequest.Body {
        if let declared, declared > maximumBodyBytes { return .tooLarge }
        if let declared { return readBody(declaredLength: declared) }
        let limit = maximumBodyBytes + 1
        var body: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while body.count < limit {
            let wanted = min(chunk.count, limit - body.count)
            let count = chunk.withUnsafeMutableBufferPointer { buffer in
                buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: wanted) {
                    FCGX_GetStr($0, Int32(wanted), request.pointee.in)
                }
            }
            if count <= 0 { break }
            body.append(contentsOf: chunk[0..<Int(count)])
        }
        if body.count > maximumBodyBytes { return .tooLarge }
        if FCGX_GetError(request.pointee.in) != 0 { return .incomplete }
        if let declared, body.count != declared { return .incomplete }
        return .complete(body)
    }

    /// A body of a declared length (nginx always declares one), read straight into its own
    /// storage: the declared length and one byte more, so a body running past it shows.
    /// No chunk zeroed and copied per request.
    private func readBody(declaredLength declared: Int) -> FastCGIRequest.Body {
        let capacity = declared + 1
        let body = [UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
            initialized = 0
            guard let base = buffer.baseAddress else { return }
            while initialized < capacity {
                let wanted = Int32(clamping: capacity - initialized)
                let count = (base + initialized).withMemoryRebound(to: CChar.self, capacity: Int(wanted)) {
                    FCGX_GetStr($0, wanted, request.pointee.in)
                }
                if count <= 0 { break }
                initialized += Int(count)
            }
        }
        if body.count > declared {
            // Past its declaration: not the message, and too large if it also runs past the
            // limit (read on, counted, not kept: at most the limit and one byte in all).
            var total = body.count
            let limit = maximumBodyBytes + 1
            var discard = [UInt8](repeating: 0, count: min(16 * 1024, limit))
            while total < limit {
                let wanted = Int32(min(discard.count, limit - total))
                let count = discard.withUnsafeMutableBytes { buffer in
                    FCGX_GetStr(buffer.baseAddress!.assumingMemoryBound(to: CChar.self), wanted, request.pointee.in)
                }
                if count <= 0 { break }
                total += Int(count)
            }
            return total > maximumBodyBytes ? .tooLarge : .incomplete
        }
        if FCGX_GetError(request.pointee.in) != 0 || body.count != declared { return .incomplete }
        return .complete(body)
    }
}
