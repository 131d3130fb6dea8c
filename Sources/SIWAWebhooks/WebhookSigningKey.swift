import Foundation
import SIWACrypto

/// One signing key of a destination, as Standard Webhooks 1.0 writes it: `whsec_<base64>`
/// (an HMAC-SHA256 secret of 24 to 64 random bytes; signature `v1,<base64>`) or
/// `whsk_<base64>` (an ed25519 seed of 32 bytes; signature `v1a,<base64>`, verified with
/// the public key `whpk_<base64>`).
public enum WebhookSigningKey: Sendable {
    case hmac(secret: [UInt8])
    case ed25519(Ed25519PrivateKey)

    public static let hmacPrefix = "whsec_"
    public static let ed25519PrivatePrefix = "whsk_"
    public static let ed25519PublicPrefix = "whpk_"
    public static let hmacSecretLengths = 24...64

    /// Reads one key as a key file holds it (one line; surrounding white space ignored).
    public init(text: String) throws(WebhookSettingError) {
        let line = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if line.hasPrefix(Self.hmacPrefix) {
            guard let secret = Self.base64(line.dropFirst(Self.hmacPrefix.count)),
                Self.hmacSecretLengths.contains(secret.count)
            else {
                throw WebhookSettingError(
                    "a whsec_ key must be the base64 of \(Self.hmacSecretLengths.lowerBound) to "
                        + "\(Self.hmacSecretLengths.upperBound) bytes")
            }
            self = .hmac(secret: secret)
        } else if line.hasPrefix(Self.ed25519PrivatePrefix) {
            guard let seed = Self.base64(line.dropFirst(Self.ed25519PrivatePrefix.count)),
                seed.count == Ed25519PrivateKey.seedLength,
                let key = try? Ed25519PrivateKey(seed: seed)
            else { throw WebhookSettingError("a whsk_ key must be the base64 of a 32-byte ed25519 seed") }
            self = .ed25519(key)
        } else {
            throw WebhookSettingError("the key must begin with whsec_ (HMAC-SHA256) or whsk_ (ed25519)")
        }
    }

    /// The scheme's signature of `content`: `v1,<base64>` or `v1a,<base64>`.
    public func signature(_ content: [UInt8]) throws(CryptoError) -> String {
        switch self {
        case .hmac(let secret):
            return "v1," + Data(HMACSHA256.authenticationCode(key: secret, message: content)).base64EncodedString()
        case .ed25519(let key):
            return "v1a," + Data(try key.sign(content)).base64EncodedString()
        }
    }

    /// The `whpk_` public key an ed25519 key's receivers verify with; nil for an HMAC secret.
    public func publicKeyText() throws(CryptoError) -> String? {
        guard case .ed25519(let key) = self else { return nil }
        return Self.ed25519PublicPrefix + Data(try key.publicKey()).base64EncodedString()
    }

    /// Strict standard base64 (padding as written); nil when it is not.
    static func base64(_ text: Substring) -> [UInt8]? {
        guard !text.isEmpty, let data = Data(base64Encoded: String(text)) else { return nil }
        return Array(data)
    }

    /// Reads a key file: a regular file owned by this process's user, readable by that user
    /// alone (mode 0600 or 0400), holding one key line. A symbolic link is refused, as is a
    /// file anyone else could read: the key signs what receivers trust.
    public static func load(file path: String) throws(WebhookSettingError) -> WebhookSigningKey {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw WebhookSettingError("cannot open the key file \(path) (\(String(cString: strerror(errno))))")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
            throw WebhookSettingError("the key file \(path) is not a regular file")
        }
        let mode = status.st_mode & 0o7777
        guard mode == 0o600 || mode == 0o400 else {
            throw WebhookSettingError(
                "the key file \(path) has mode \(String(mode, radix: 8)): it must be 0600 or 0400 (readable by the service user alone)"
            )
        }
        guard status.st_uid == geteuid() else {
            throw WebhookSettingError(
                "the key file \(path) is owned by uid \(status.st_uid), not by the service user (uid \(geteuid()))")
        }
        var bytes = [UInt8](repeating: 0, count: 512)
        let count = bytes.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0, count < bytes.count else {
            throw WebhookSettingError("the key file \(path) is empty or longer than one key line")
        }
        let text = String(decoding: bytes[0..<count], as: UTF8.self)
        do throws(WebhookSettingError) {
            return try WebhookSigningKey(text: text)
        } catch {
            throw WebhookSettingError("the key file \(path): \(error.message)")
        }
    }

    /// A fresh key of `scheme`, as its key file's line.
    public static func generate(ed25519: Bool) throws(CryptoError) -> String {
        if ed25519 {
            return ed25519PrivatePrefix + Data(try Ed25519PrivateKey.generateSeed()).base64EncodedString()
        }
        return hmacPrefix + Data(try RandomBytes.generate(32)).base64EncodedString()
    }
}

/// What is wrong with the webhook settings (a destination, a key file): named, and
/// refused at start like every other setting.
public struct WebhookSettingError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
