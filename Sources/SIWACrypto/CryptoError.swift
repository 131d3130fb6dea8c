import COpenSSL

/// A failure inside OpenSSL: what failed, and the reasons OpenSSL put on this thread's
/// error queue for it (oldest first), which the queue then no longer holds.
public struct CryptoError: Error, CustomStringConvertible, Sendable {
    /// What failed, in plain words.
    public let message: String
    /// OpenSSL's reason text of each entry of the error queue (`ERR_reason_error_string`),
    /// e.g. `key size too small`; empty when OpenSSL queued none.
    public let openSSLReasons: [String]

    init(_ message: String, openSSLReasons: [String] = []) {
        self.message = message
        self.openSSLReasons = openSSLReasons
    }

    public var description: String {
        openSSLReasons.isEmpty ? message : "\(message) (OpenSSL: \(openSSLReasons.joined(separator: "; ")))"
    }

    /// The error for a failed OpenSSL call: drains this thread's error queue into it, so no
    /// stale entry is left behind for the next caller on the thread (libcurl shares it).
    static func fromOpenSSL(_ message: String) -> CryptoError {
        CryptoError(message, openSSLReasons: drainErrorQueue())
    }

    /// Empties this thread's error queue, returning each entry's reason text.
    static func drainErrorQueue() -> [String] {
        var reasons: [String] = []
        // Bounded: the queue holds at most ERR_NUM_ERRORS (16) entries.
        for _ in 0..<64 {
            let code = ERR_get_error()
            if code == 0 { break }
            if let reason = ERR_reason_error_string(code) {
                reasons.append(String(cString: reason))
            } else {
                reasons.append("error \(code)")
            }
        }
        return reasons
    }
}
