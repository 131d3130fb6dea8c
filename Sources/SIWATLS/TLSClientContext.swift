import COpenSSL
import COpenSSLShim
import Glibc
import Synchronization

/// The client side's TLS settings, made once and shared by every connection (an
/// `SSL_CTX` may be used by many threads to make connections): TLS 1.2 at least, the
/// peer's certificate verified against the CA file (or the system trust store), and
/// an optional client certificate and key for servers that ask for one (mutual TLS).
// Unchecked: it holds OpenSSL's `SSL_CTX` pointer, never changed after init (OpenSSL allows
// one context to make connections on many threads); the sessions it keeps are under a Mutex.
public final class TLSClientContext: @unchecked Sendable {
    /// What the context is made of: paths, compared and hashed to share one context.
    public struct Settings: Sendable, Hashable {
        /// PEM CA certificates that may sign the peer's certificate; nil: the system trust store.
        public var caFile: String?
        /// The client's PEM certificate chain and key, for a server that asks for one.
        public var certificateFile: String?
        public var keyFile: String?

        public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil) {
            self.caFile = caFile
            self.certificateFile = certificateFile
            self.keyFile = keyFile
        }
    }

    public let settings: Settings
    // Immutable after init; OpenSSL locks its own reference counts.
    let context: OpaquePointer

    /// Loads the files now: a file that cannot be used is an error here, not at the first connection.
    public init(_ settings: Settings) throws(TLSError) {
        self.settings = settings
        ERR_clear_error()
        guard let made = SSL_CTX_new(TLS_client_method()) else {
            throw TLSError(.setupFailed, "OpenSSL could not make a TLS context: \(Self.openSSLReason())")
        }
        context = made
        guard siwa_ssl_ctx_require_tls12(made) == 1 else {
            throw TLSError(.setupFailed, "OpenSSL refused TLS 1.2 as the minimum: \(Self.openSSLReason())")
        }
        SSL_CTX_set_verify(made, SSL_VERIFY_PEER, nil)
        // Read ahead: one read(2) takes whatever has arrived (a whole reply, several records)
        // into OpenSSL's buffer, instead of one read for each record's 5-byte header and
        // another for its body. (SSL_CTX_set_read_ahead is a macro over this call.)
        _ = SSL_CTX_ctrl(made, SSL_CTRL_SET_READ_AHEAD, 1, nil)
        if let caFile = settings.caFile {
            guard SSL_CTX_load_verify_locations(made, caFile, nil) == 1 else {
                throw TLSError(.caFileUnusable, "cannot load CA certificates from \(caFile): \(Self.openSSLReason())")
            }
        } else if SSL_CTX_set_default_verify_paths(made) != 1 {
            throw TLSError(.caFileUnusable, "cannot load the system trust store: \(Self.openSSLReason())")
        }
        if let certificateFile = settings.certificateFile {
            guard SSL_CTX_use_certificate_chain_file(made, certificateFile) == 1 else {
                throw TLSError(
                    .certificateFileUnusable,
                    "cannot load a PEM certificate chain from \(certificateFile): \(Self.openSSLReason())")
            }
        }
        if let keyFile = settings.keyFile {
            guard SSL_CTX_use_PrivateKey_file(made, keyFile, SSL_FILETYPE_PEM) == 1 else {
                throw TLSError(
                    .keyFileUnusable, "cannot load a PEM private key from \(keyFile): \(Self.openSSLReason())")
            }
            guard SSL_CTX_check_private_key(made) == 1 else {
                throw TLSError(.keyFileUnusable, "the key in \(keyFile) does not match the client certificate")
            }
        }
    }

    deinit {
        sessions.withLock { kept in
            for session in kept.values { SSL_SESSION_free(session.pointer) }
        }
        SSL_CTX_free(context)
    }

    /// An `SSL_SESSION` this context holds one reference to.
    // Unchecked: only ever touched under `sessions`' Mutex (OpenSSL counts the references
    // atomically); a session handed out is a new reference the caller owns.
    struct HeldSession: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    /// The last resumable session each server gave, by the name verified and the address
    /// connected to, offered again on the next connection there: a reconnect then skips the
    /// certificate exchange. A server that cannot resume it (restarted, new keys) makes a
    /// full handshake, its certificate verified as on any first connection.
    private let sessions = Mutex<[String: HeldSession]>([:])
    /// Servers remembered at most: a few Redis nodes in practice.
    private static let sessionLimit = 64

    /// A new reference to the session kept for `server`, for `SSL_set_session`; the caller frees it.
    func resumableSession(for server: String) -> OpaquePointer? {
        sessions.withLock { kept in
            guard let session = kept[server] else { return nil }
            SSL_SESSION_up_ref(session.pointer)
            return session.pointer
        }
    }

    /// Keeps `session` (a reference the caller gives away) as the one to offer `server` next.
    func keep(_ session: OpaquePointer, for server: String) {
        let held = HeldSession(pointer: session)
        sessions.withLock { kept in
            if kept[server] == nil, kept.count >= Self.sessionLimit, let other = kept.first {
                SSL_SESSION_free(other.value.pointer)
                kept[other.key] = nil
            }
            if let old = kept.updateValue(held, forKey: server) { SSL_SESSION_free(old.pointer) }
        }
    }

    private static let shared = Mutex<[Settings: TLSClientContext]>([:])

    /// One context per distinct settings in the process: connections made again and again
    /// (reconnects, one per worker) do not read the files again.
    public static func shared(for settings: Settings) throws(TLSError) -> TLSClientContext {
        if let known = shared.withLock({ $0[settings] }) { return known }
        let made = try TLSClientContext(settings)
        return shared.withLock { contexts in
            if let known = contexts[settings] { return known }
            contexts[settings] = made
            return made
        }
    }

    /// The oldest reason in this thread's OpenSSL error queue (then emptied), or a placeholder.
    static func openSSLReason() -> String {
        let code = ERR_get_error()
        ERR_clear_error()
        guard code != 0 else { return "no detail from OpenSSL" }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
