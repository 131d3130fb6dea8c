import SIWATLS

/// TLS to Redis: what a `rediss://` URL turns on, with the CA file, the client certificate
/// and key, and the server name the caller configured (an error about one of the files
/// carries it as its field). TLS 1.2 at least; the server's certificate must chain
/// to the CA file (or the system trust store), be valid now, and name the host.
public struct RedisTLS: Sendable, Hashable {
    /// PEM CA certificates that may sign the server's certificate; nil: the system trust store.
    public var caFile: String?
    /// The client certificate chain and key, for a server that asks for one (mutual TLS).
    public var certificateFile: String?
    public var keyFile: String?
    /// The name the server's certificate must hold (and SNI), when it is not the host
    /// connected to: a primary the sentinels name by IP address, for example.
    public var serverName: String?

    public init(
        caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil, serverName: String? = nil
    ) {
        self.caFile = caFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.serverName = serverName
    }

    /// Loads the files now (once per process for the same files): the error names the setting.
    public func check() throws(RedisError) { _ = try context() }

    func context() throws(RedisError) -> TLSClientContext {
        do throws(TLSError) {
            return try TLSClientContext.shared(
                for: .init(caFile: caFile, certificateFile: certificateFile, keyFile: keyFile))
        } catch {
            // A file the caller configured is named by the field; the others in the text.
            switch error.code {
            case .caFileUnusable where caFile != nil:
                throw RedisError(.tlsRefused, error.message, field: .tlsCAFile)
            case .caFileUnusable: throw RedisError(.tlsRefused, "the system trust store: \(error.message)")
            case .certificateFileUnusable: throw RedisError(.tlsRefused, error.message, field: .tlsCertificateFile)
            case .keyFileUnusable: throw RedisError(.tlsRefused, error.message, field: .tlsKeyFile)
            default: throw RedisError(.tlsRefused, "TLS to Redis: \(error.message)")
            }
        }
    }
}
