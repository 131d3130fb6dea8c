import Foundation

/// A throwaway CA and a server certificate for `localhost`, made with the `openssl` CLI.
///
/// The server certificate names only `DNS:localhost`, so a client that connects to
/// `127.0.0.1` is talking to a host the certificate does not name.
struct TestCertificateAuthority {
    let directory: URL
    /// The CA certificate (PEM): what a client must trust.
    let caCertificatePath: String
    /// The server's certificate (PEM), signed by the CA.
    let serverCertificatePath: String
    /// The server's private key (PEM).
    let serverKeyPath: String

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Makes the CA and the `localhost` certificate inside `directory`.
    init(in directory: URL) throws {
        self.directory = directory
        caCertificatePath = directory.appendingPathComponent("ca.pem").path
        serverCertificatePath = directory.appendingPathComponent("server.pem").path
        serverKeyPath = directory.appendingPathComponent("server.key").path
        let caKeyPath = directory.appendingPathComponent("ca.key").path
        let requestPath = directory.appendingPathComponent("server.csr").path
        let extensionsPath = directory.appendingPathComponent("server.ext").path
        try """
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature, keyEncipherment
        extendedKeyUsage = serverAuth
        subjectAltName = DNS:localhost

        """.write(toFile: extensionsPath, atomically: true, encoding: .utf8)

        try Self.openssl([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", caKeyPath, "-out", caCertificatePath,
            "-days", "2", "-subj", "/CN=SIWA Test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ])
        try Self.openssl([
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", serverKeyPath, "-out", requestPath,
            "-subj", "/CN=localhost",
        ])
        try Self.openssl([
            "x509", "-req", "-in", requestPath, "-CA", caCertificatePath, "-CAkey", caKeyPath,
            "-CAcreateserial", "-out", serverCertificatePath, "-days", "2", "-extfile", extensionsPath,
        ])
    }

    private static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let output = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(
                description: "openssl \(arguments[0]) failed: \(String(decoding: output, as: UTF8.self))")
        }
    }
}
