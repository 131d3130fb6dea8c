import CFastCGI
import Foundation
import Glibc

/// libfcgi's process-wide initialisation, done once.
enum FastCGILibrary {
    private static let result: Int32 = {
        // FCGX_Init installs handlers for SIGTERM and SIGUSR1 (where none was set) that only
        // raise libfcgi's process-wide shutdownPending flag: that flag never resets and makes
        // every later accept fail, in every server of the process. Keep the old handlers and
        // leave shutdown to FastCGIServer.
        var oldTerm = sigaction()
        var oldUsr1 = sigaction()
        sigaction(SIGTERM, nil, &oldTerm)
        sigaction(SIGUSR1, nil, &oldUsr1)
        let status = FCGX_Init()
        sigaction(SIGTERM, &oldTerm, nil)
        sigaction(SIGUSR1, &oldUsr1, nil)
        // A peer that closes early must cost one failed write, not the process.
        signal(SIGPIPE, SIG_IGN)
        return status
    }()

    static func initialize() throws(FastCGIError) {
        guard result == 0 else { throw FastCGIError(.libraryFailed, "FCGX_Init failed with \(result)") }
    }
}

extension FastCGILibrary {
    /// A close-on-exec pipe (Glibc's pipe2 needs _GNU_SOURCE, which the module map lacks).
    static func makePipe() throws(FastCGIError) -> (read: Int32, write: Int32) {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw .system(.listenFailed, "pipe", errno: errno) }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        return (ends[0], ends[1])
    }
}
