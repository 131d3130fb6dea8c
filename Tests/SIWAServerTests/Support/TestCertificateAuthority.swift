import Foundation

/// A throwaway CA and a server certificate for `localhost`, made by the certificate
/// functions of `scripts/lib/local-stack.sh` that run-local and the deployment tests use
/// too (one place makes every test certificate).
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

    /// Makes the CA and the `localhost` certificate inside `directory`, valid for two days.
    /// `serverUsage`: the server certificate's extended key usage (`serverAuth,clientAuth`
    /// for a Redis whose replicas present it to their primary); `serverNames`: the names it holds
    /// (a cluster whose clients connect to the addresses it announces needs `IP:127.0.0.1`).
    init(in directory: URL, serverUsage: String = "serverAuth", serverNames: String = "DNS:localhost") throws {
        self.directory = directory
        caCertificatePath = directory.appendingPathComponent("ca.pem").path
        serverCertificatePath = directory.appendingPathComponent("server.pem").path
        serverKeyPath = directory.appendingPathComponent("server.key").path
        try Self.localStack("stack_make_ca", [directory.path, "2", "SIWA Test CA"])
        try Self.localStack(
            "stack_make_leaf", [directory.path, "server", "rsa", "sha256", "2", serverNames, serverUsage])
    }

    /// A certificate and key signed by this CA, named `name` in the directory: for a TLS
    /// client (`clientAuth`) or another server.
    func makeLeaf(_ name: String, san: String = "DNS:localhost", usage: String) throws -> (
        certificatePath: String, keyPath: String
    ) {
        try Self.localStack("stack_make_leaf", [directory.path, name, "rsa", "sha256", "2", san, usage])
        return (
            directory.appendingPathComponent("\(name).pem").path, directory.appendingPathComponent("\(name).key").path
        )
    }

    /// A `localhost` server certificate signed by this CA that expired in February 2020.
    func makeExpiredServerCertificate(_ name: String) throws -> (certificatePath: String, keyPath: String) {
        try Self.localStack("stack_make_expired_leaf", [directory.path, name, "DNS:localhost"])
        return (
            directory.appendingPathComponent("\(name).pem").path, directory.appendingPathComponent("\(name).key").path
        )
    }

    /// Runs one function of `scripts/lib/local-stack.sh` with `arguments`.
    private static func localStack(_ function: String, _ arguments: [String]) throws {
        let library = ExampleFiles.path("scripts/lib/local-stack.sh")
        let run = try CommandRun.run(
            URL(fileURLWithPath: "/bin/bash"),
            ["-c", #"set -euo pipefail; source "$0"; "$@""#, library, function] + arguments,
            environment: ["PATH": "/usr/bin:/bin"])
        guard run.status == 0 else {
            throw Failure(description: "\(function) failed (exit \(run.status)): \(run.errors)")
        }
    }
}
