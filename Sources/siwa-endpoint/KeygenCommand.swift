import Foundation
import SIWASupport
import SIWATestKit

/// `keygen --out DIR [--kid KID]`: a test signing key and its JWKS.
enum KeygenCommand {
    static let help = """
        usage: siwa-endpoint keygen --out DIR [--kid KID]

        Writes DIR/test-signing-key.pem (mode 0600) and DIR/test-jwks.json: a TEST
        RSA-2048 key and the matching JWKS, for tests and local runs. Apple's real
        keys are never on your machine; never deploy with these.
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(words, valueOptions: ["--out", "--kid"])
        let directory = URL(fileURLWithPath: try arguments.required("--out"), isDirectory: true)
        let keyID = arguments.value("--kid") ?? "test-" + TestNotification.randomTokenID().prefix(10)
        let key = try TestSigningKey.generate(keyID: keyID)

        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let keyFile = directory.appendingPathComponent("test-signing-key.pem")
        let jwksFile = directory.appendingPathComponent("test-jwks.json")
        guard
            FileManager.default.createFile(
                atPath: keyFile.path, contents: Data(try key.privateKey.pem().utf8),
                attributes: [.posixPermissions: 0o600])
        else { throw UsageError("cannot write \(keyFile.path)") }
        try Data(try TestSigningKey.jwksDocument([key]).utf8).write(to: jwksFile, options: .atomic)

        Output.line(
            #"{"kid":"\#(keyID)","private_key":"\#(keyFile.path)","jwks":"\#(jwksFile.path)"}"#)
        return .success
    }
}
