import Foundation
import Glibc
import SIWACrypto
import SIWAGoogleAPI
import SIWASettings
import SIWAStore
import Testing

/// The service account's key file is a credential that can redirect the project's security
/// events: read only when it is a regular file of the user running the command, closed to
/// everyone else, in Google's JSON format; never echoed.
@Suite("The service account key file: refused unless a regular 0600 file of the user's own")
struct GoogleServiceAccountKeyTests {
    let directory: URL
    let key: RSAPrivateKey

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-gkey-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        key = try RSAPrivateKey.generate()
    }

    func keyFile(_ name: String = "key.json", mode: Int = 0o600) throws -> String {
        let path = directory.appendingPathComponent(name).path
        try GoogleManagementStack.writeKeyFile(path, key: key)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        return path
    }

    func refusal(_ path: String, owner: uid_t = geteuid()) throws -> GoogleServiceAccountKeyError {
        defer { try? FileManager.default.removeItem(at: directory) }
        return try #require(throws: GoogleServiceAccountKeyError.self) {
            _ = try GoogleServiceAccountKey(contentsOf: path, owner: owner)
        }
    }

    @Test("0600 and 0400 files of the user's own are read: email, key ID, the key itself", arguments: [0o600, 0o400])
    func acceptedModes(mode: Int) throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let read = try GoogleServiceAccountKey(contentsOf: try keyFile(mode: mode))
        #expect(read.clientEmail == GoogleManagementStack.clientEmail)
        #expect(read.privateKeyID == GoogleManagementStack.keyID)
        #expect(try read.privateKey.modulus() == key.modulus())
    }

    @Test(
        "any group or other bit: key_file_permissions, the mode named", arguments: [0o644, 0o640, 0o620, 0o604, 0o601])
    func openModesAreRefused(mode: Int) throws {
        let error = try refusal(try keyFile(mode: mode))
        #expect(error.code == .tooOpen)
        #expect(error.message.contains("mode \(String(mode, radix: 8))") && error.message.contains("chmod 600"))
    }

    @Test("owned by another user: key_file_owner")
    func anotherOwnerIsRefused() throws {
        let error = try refusal(try keyFile(), owner: geteuid() &+ 1)
        #expect(error.code == .wrongOwner)
    }

    @Test("a directory, a FIFO (the open does not block): key_file_not_regular; a missing file: key_file_unreadable")
    func notRegularFiles() throws {
        let fifo = directory.appendingPathComponent("fifo").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let dir = directory.appendingPathComponent("dir").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
        #expect(chmod(dir, 0o700) == 0)
        for path in [fifo, dir] {
            let error = try #require(throws: GoogleServiceAccountKeyError.self) {
                _ = try GoogleServiceAccountKey(contentsOf: path)
            }
            #expect(error.code == .notRegularFile)
        }
        let error = try refusal(directory.appendingPathComponent("missing.json").path)
        #expect(error.code == .unreadable)
    }

    @Test("a symbolic link to a good file is followed and its target judged (a Kubernetes secret)")
    func symbolicLinkToAGoodFile() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let target = try keyFile()
        let link = directory.appendingPathComponent("link.json").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        #expect(try GoogleServiceAccountKey(contentsOf: link).privateKeyID == GoogleManagementStack.keyID)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: target)
        let error = try #require(throws: GoogleServiceAccountKeyError.self) {
            _ = try GoogleServiceAccountKey(contentsOf: link)
        }
        #expect(error.code == .tooOpen)
    }

    /// Writes `text` at 0600 and returns its refusal.
    func refusalOf(_ text: String) throws -> GoogleServiceAccountKeyError {
        let path = directory.appendingPathComponent("bad-\(UUID().uuidString).json").path
        _ = FileManager.default.createFile(
            atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        return try #require(throws: GoogleServiceAccountKeyError.self) {
            _ = try GoogleServiceAccountKey(contentsOf: path)
        }
    }

    @Test("not Google's format: key_file_malformed or key_file_unusable_key, and no byte of the key in the message")
    func malformedFiles() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let pem = try key.pem()
        func document(_ members: [String: String]) -> String {
            "{"
                + members.map { "\"\($0.key)\": \"\($0.value.replacingOccurrences(of: "\n", with: "\\n"))\"" }
                .joined(separator: ", ") + "}"
        }
        let full = ["client_email": "a@b.iam.gserviceaccount.com", "private_key_id": "abc", "private_key": pem]
        let ec = try String(contentsOfFile: WrongKindKey.ecKeyPath(in: directory), encoding: .utf8)
        let cases: [(String, GoogleServiceAccountKeyError.Code)] = [
            ("not json " + pem, .malformed),
            (document(full.filter { $0.key != "private_key" }), .malformed),
            (document(full.filter { $0.key != "client_email" }), .malformed),
            (document(full.filter { $0.key != "private_key_id" }), .malformed),
            (document(full.merging(["type": "authorized_user"]) { $1 }), .malformed),
            (document(full.merging(["client_email": "not an email"]) { $1 }), .malformed),
            (
                document(
                    full.merging(["private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"]) {
                        $1
                    }), .unusableKey
            ),
            (document(full.merging(["private_key": ec]) { $1 }), .unusableKey),
        ]
        for (text, code) in cases {
            let error = try refusalOf(text)
            #expect(error.code == code, "\(text.prefix(40))")
            #expect(
                !error.description.contains("PRIVATE KEY")
                    && !error.description.contains(String(pem.dropFirst(40).prefix(20))))
        }
    }
}

/// An EC P-256 key in PEM, made by the openssl CLI: a private key of the wrong kind.
enum WrongKindKey {
    static func ecKeyPath(in directory: URL) throws -> String {
        let path = directory.appendingPathComponent("ec-\(UUID().uuidString).pem").path
        try ReconcileStack.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
        return path
    }
}
