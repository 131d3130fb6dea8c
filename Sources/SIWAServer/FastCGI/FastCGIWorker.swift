import CFastCGI
import Glibc

/// One worker thread's libfcgi loop: its own `FCGX_Request`, accept, read, call the
/// handler, write, finish. Every libfcgi pointer of the server lives in this file.
final class FastCGIWorker: @unchecked Sendable {
    private let request: UnsafeMutablePointer<FCGX_Request>
    private let maxBodyBytes: Int
    private let ioTimeout: Duration
    private let stopSignalFD: Int32
    private let handler: @Sendable (FastCGIRequest) -> FastCGIResponse
    private let isStopping: @Sendable () -> Bool

    /// `stopSignalFD` becomes readable (and stays so) once the server is stopping; an idle
    /// kept connection is watched together with it.
    init(
        listenFD: Int32,
        stopSignalFD: Int32,
        maxBodyBytes: Int,
        ioTimeout: Duration,
        handler: @escaping @Sendable (FastCGIRequest) -> FastCGIResponse,
        isStopping: @escaping @Sendable () -> Bool
    ) throws(FastCGIError) {
        request = .allocate(capacity: 1)
        guard FCGX_InitRequest(request, listenFD, 0) == 0 else {
            request.deallocate()
            throw FastCGIError(.libraryFailed, "FCGX_InitRequest failed")
        }
        self.stopSignalFD = stopSignalFD
        self.maxBodyBytes = maxBodyBytes
        self.ioTimeout = ioTimeout
        self.handler = handler
        self.isStopping = isStopping
    }

    /// Serves until the server stops; then closes any kept connection and frees the request.
    func run() {
        defer {
            FCGX_Free(request, 1)
            request.deallocate()
        }
        while true {
            if request.pointee.ipcFd >= 0 {
                // nginx (fastcgi_keep_conn on) kept the connection: libfcgi would block in
                // read(2) for its next request, where no stop could reach it. Wait here instead.
                guard waitForNextRequest() else {
                    // Idle and stopping. Shut both directions first: libfcgi's close would
                    // otherwise wait up to 2 s for nginx to close its end.
                    shutdown(request.pointee.ipcFd, Int32(SHUT_RDWR))
                    return
                }
            } else if isStopping() {
                return
            }
            let status = FCGX_Accept_r(request)
            if status < 0 {
                if isStopping() { return }
                // EMFILE and the like: back off briefly rather than spin on a full table.
                usleep(50_000)
                continue
            }
            serveAcceptedRequest()
        }
    }

    /// True when the kept connection has bytes (or its end) to read; false when the server
    /// is stopping and the connection is idle.
    private func waitForNextRequest() -> Bool {
        var fds = [
            pollfd(fd: request.pointee.ipcFd, events: Int16(POLLIN), revents: 0),
            pollfd(fd: stopSignalFD, events: Int16(POLLIN), revents: 0),
        ]
        while true {
            let ready = poll(&fds, nfds_t(fds.count), -1)
            if ready < 0 && errno == EINTR { continue }
            if fds[0].revents != 0 { return true }
            return false
        }
    }

    private func serveAcceptedRequest() {
        let params = copyParams()
        applyTimeouts(to: request.pointee.ipcFd)
        let body = readBody(declaredLength: params.value("CONTENT_LENGTH"))
        if case .complete = body {
        } else {
            // Unread or unreliable input is left on the connection: do not reuse it.
            request.pointee.keepConnection = 0
        }
        let response = handler(FastCGIRequest(parameters: params, body: body))
        let bytes = response.serialized()
        bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return }
            base.withMemoryRebound(to: CChar.self, capacity: buffer.count) { pointer in
                // A failed write means the peer left; there is no one left to tell.
                _ = FCGX_PutStr(pointer, Int32(buffer.count), request.pointee.out)
            }
        }
        FCGX_Finish_r(request)
    }

    /// Every parameter, copied now (as bytes into one buffer, no `String` made yet):
    /// libfcgi frees them at the next finish or accept.
    private func copyParams() -> FastCGIParameters {
        var params = FastCGIParameters()
        guard var cursor = request.pointee.envp else { return params }
        while let entry = cursor.pointee {
            entry.withMemoryRebound(to: UInt8.self, capacity: 1) { start in
                params.append(entry: UnsafeBufferPointer(start: start, count: strlen(entry)))
            }
            cursor += 1
        }
        return params
    }

    /// Reads at most `maxBodyBytes + 1` bytes: one byte past the limit is proof enough.
    private func readBody(declaredLength: String?) -> FastCGIRequest.Body {
        let declared = declaredLength.flatMap(FastCGIRequest.parseLength)
        if let declared, declared > maxBodyBytes { return .tooLarge }
        if let declaredLength, !declaredLength.isEmpty, declared == nil { return .incomplete }
        let limit = maxBodyBytes + 1
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
        if body.count > maxBodyBytes { return .tooLarge }
        if FCGX_GetError(request.pointee.in) != 0 { return .incomplete }
        if let declared, body.count != declared { return .incomplete }
        return .complete(body)
    }

    private func applyTimeouts(to fd: Int32) {
        guard fd >= 0 else { return }
        let (seconds, attoseconds) = ioTimeout.components
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }
}
