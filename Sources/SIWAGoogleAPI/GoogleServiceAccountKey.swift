import Glibc
import SIWACrypto
import SIWAJSON

/// A Google Cloud service account's key, read from the JSON key file the Cloud console gives
/// (`client_email`, `private_key` PEM, `private_key_id`): what signs the RISC management
/// API's authorisation JWT.
///
/// The file is a credential that can rewrite where Google sends the project's security events,
/// so it is refused unless it is a regular file owned by the user running the command and
/// closed to its group and to others (0600 or 0400), as ssh refuses an open private key.
/// The checks are made on the descriptor that is read (`fstat` after `open`), so a file swapped
/// between a check and the read cannot pass; a symbolic link is followed and its target judged
/// (Kubernetes mounts secrets through links). Nothing of the file is ever printed.
public struct GoogleServiceAccountKey: Sendable {
    /// The largest key file read: Google's are about 2.4 KB.
    public static let maximumFileBytes = 64 * 1024

    public let clientEmail: String
    public let privateKeyID: String
    public let privateKey: RSAPrivateKey

    public init(clientEmail: String, privateKeyID: String, privateKey: RSAPrivateKey) {
        self.clientEmail = clientEmail
        self.privateKeyID = privateKeyID
        self.privateKey = privateKey
    }

    /// Reads and checks the key file at `path`; `owner` is the user who must own it (the
    /// effective user running the command).
    public init(contentsOf path: String, owner: uid_t = geteuid()) throws(GoogleServiceAccountKeyError) {
        let bytes = try Self.readGuarded(path, owner: owner)
        guard case .object(let members)? = try? StrictJSONParser.parse(bytes) else {
            throw GoogleServiceAccountKeyError(
                .malformed, "\(path) is not a JSON object: download the service account's JSON key again")
        }
        func member(_ name: String) throws(GoogleServiceAccountKeyError) -> String {
            guard case .string(let value)? = members[name], !value.isEmpty else {
                throw GoogleServiceAccountKeyError(
                    .malformed, "\(path) has no \(name): it must be a service account's JSON key (Google's format)")
            }
            return value
        }
        if case .string(let type)? = members["type"], type != "service_account" {
            throw GoogleServiceAccountKeyError(
                .malformed, "\(path) is a key of type \(type), not a service account's key")
        }
        let email = try member("client_email")
        let keyID = try member("private_key_id")
        let pem = try member("private_key")
        guard email.utf8.count <= 320, email.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }), email.contains("@") else {
            throw GoogleServiceAccountKeyError(.malformed, "\(path): client_email is not an email address")
        }
        guard keyID.utf8.count <= 128, keyID.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != 0x22 }) else {
            throw GoogleServiceAccountKeyError(.malformed, "\(path): private_key_id is not a key ID")
        }
        do {
            privateKey = try RSAPrivateKey(pem: pem)
        } catch {
            throw GoogleServiceAccountKeyError(
                .unusableKey, "\(path): private_key is not an RSA private key in PEM (\(error.message))")
        }
        clientEmail = email
        privateKeyID = keyID
    }

    /// The file's bytes, once the descriptor read is known to be a small regular file of
    /// `owner`'s, closed to others.
    private static func readGuarded(_ path: String, owner: uid_t) throws(GoogleServiceAccountKeyError) -> [UInt8] {
        // O_NONBLOCK: a FIFO planted at the path must not block the open; it is refused below.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard descriptor >= 0 else {
            throw GoogleServiceAccountKeyError(
                .unreadable, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw GoogleServiceAccountKeyError(.unreadable, "cannot stat \(path): \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw GoogleServiceAccountKeyError(.notRegularFile, "\(path) is not a regular file")
        }
        guard status.st_uid == owner else {
            throw GoogleServiceAccountKeyError(
                .wrongOwner,
                "\(path) is owned by uid \(status.st_uid), not by uid \(owner) who runs this command: "
                    + "chown it to the service user (a key another user can replace is not this user's key)")
        }
        let permissions = status.st_mode & 0o777
        guard permissions & 0o077 == 0 else {
            throw GoogleServiceAccountKeyError(
                .tooOpen,
                "\(path) has mode \(String(permissions, radix: 8)): other users can read or change it; "
                    + "chmod 600 it (and rotate the key if others could read it)")
        }
        guard status.st_size <= off_t(maximumFileBytes) else {
            throw GoogleServiceAccountKeyError(
                .malformed, "\(path) is larger than \(maximumFileBytes) bytes: not a service account key")
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 8192)
        while bytes.count <= maximumFileBytes {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw GoogleServiceAccountKeyError(
                    .unreadable, "reading \(path) failed: \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes += chunk[0..<count]
        }
        guard bytes.count <= maximumFileBytes else {
            throw GoogleServiceAccountKeyError(
                .malformed, "\(path) is larger than \(maximumFileBytes) bytes: not a service account key")
        }
        return bytes
    }
}
