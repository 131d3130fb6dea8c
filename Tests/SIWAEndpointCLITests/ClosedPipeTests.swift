import Foundation
import SIWATestSupport
import Testing

/// Every command's output to a closed pipe (`siwa-endpoint ... | head -1` once head has
/// gone) ends quietly: exit status 141 (what a shell reports for a command a closed pipe
/// ended), nothing on standard error, never a trap of Foundation's FileHandle.write
/// (`Illegal instruction`, 132). The transfer run into a closed pipe, with its records, is
/// in TransferCorrectionTests.
@Suite("output to a closed pipe", .serialized)
struct ClosedPipeTests {
    /// The subcommands `siwa-endpoint --help` lists, each asked for its `--help` (a report on
    /// standard output through the one writer every command uses).
    static let subcommands = [
        "serve", "keygen", "sign", "verify", "bench", "load", "user", "status", "spool", "reconcile", "revoke",
        "deletions", "transfer", "canary", "deliver", "google",
    ]

    @Test("each command's report into a closed pipe: exit 141, standard error silent")
    func everyCommandEndsQuietly() throws {
        let listed = try EndpointBinary.run(["--help"]).standardOutput
        for name in Self.subcommands { #expect(listed.contains("  \(name) "), "\(name) is a subcommand") }
        for arguments in Self.subcommands.map({ [$0, "--help"] }) + [["--help"], ["--version"]] {
            let run = try CommandRun.runIntoClosedPipe(EndpointBinary.url, arguments)
            #expect(run.status == 141, "\(arguments)")
            #expect(run.errors.isEmpty, "\(arguments): \(run.errors)")
        }
    }

    @Test("sign --count into a closed pipe: exit 141 at the first write, nothing on standard error")
    func signedBodiesIntoAClosedPipe() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-pipe-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try EndpointBinary.run(["keygen", "--out", directory.path, "--kid", "pipe-key"]).status == 0)
        let run = try CommandRun.runIntoClosedPipe(
            EndpointBinary.url,
            [
                "sign", "--key", directory.appendingPathComponent("test-signing-key.pem").path, "--kid", "pipe-key",
                "--type", "consent-revoked", "--sub", "000111.pipe", "--client-id", "com.example.app", "--count", "50",
            ])
        #expect(run.status == 141)
        #expect(run.errors.isEmpty, "\(run.errors)")
    }

    /// The one writer: no command writes standard output or standard error around it (a
    /// FileHandle write traps on a closed pipe, a print is buffered past a failure).
    @Test("no command writes standard output or error except through Output")
    func oneWriter() throws {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/siwa-endpoint")
        for name in try FileManager.default.contentsOfDirectory(atPath: sources.path) where name.hasSuffix(".swift") {
            let text = try String(contentsOf: sources.appendingPathComponent(name), encoding: .utf8)
            for forbidden in ["FileHandle.standardOutput", "FileHandle.standardError", "print(", "fputs("] {
                #expect(!text.contains(forbidden), "\(name) uses \(forbidden)")
            }
        }
    }
}
