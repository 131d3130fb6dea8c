import Foundation
import SIWAAppleAPI
import SIWAJSON
import SIWASupport

#if canImport(Glibc)
    import Glibc
#endif

/// `siwa-endpoint <subcommand>`: the responder and its test kit.
@main
enum SIWAEndpointCommand {
    static let subcommands: [(name: String, summary: String)] = [
        ("serve", "run the FastCGI responder (settings from SIWA_* environment variables)"),
        ("keygen", "make a test RSA-2048 signing key and its JWKS: keygen --out DIR"),
        ("sign", "print a signed notification body, as Apple sends one (test kit)"),
        ("verify", "verify one captured request body and say why it was refused"),
        ("bench", "time full verification against the bare OpenSSL RS256 check"),
        ("load", "drive a running responder's FastCGI socket: notifications vs health checks"),
        ("user", "what Redis holds for one user: user CLIENT_ID SUB|TRANSFER_SUB [--session-started T]"),
        ("status", "a running responder's health over its FastCGI socket (--json: the document)"),
        ("spool", "spool status, list, show ID, requeue [ID], discard ID --reason TEXT"),
        ("reconcile", "ask Apple, once a day per user, which refresh tokens it refuses; end those sessions"),
        ("revoke", "revoke users' tokens at Apple (in-app account deletion); end their sessions"),
        ("deletions", "the deletion duty: deletions no consumer group acknowledged, per group, with ages"),
        ("transfer", "app transfer between teams: transfer export (sending team), transfer import (recipient)"),
        ("canary", "a real notification on demand: revoke a test user's token, wait for its consent-revoked"),
        ("deliver", "POST each event to configured webhook destinations (Standard Webhooks); status, replay, test"),
        ("google", "Google's RISC stream: google register, status, enable, disable, verify (a SET on demand)"),
    ]

    static let usage = """
        usage: siwa-endpoint <subcommand> [options]

        subcommands:
        \(subcommands.map { "  " + $0.name.padding(toLength: 11, withPad: " ", startingAt: 0) + $0.summary }.joined(separator: "\n"))

        Run `siwa-endpoint <subcommand> --help` for its options, `siwa-endpoint --version` for
        the version.

        exit status, the same table for every command (docs/operations.md, "Exit status"):
        \(ExitStatus.allCases.map { "  " + String($0.rawValue).padding(toLength: 5, withPad: " ", startingAt: 0) + $0.meaning }.joined(separator: "\n"))
        """

    static func main() {
        // Every command: a write to a closed pipe or socket is an error the writer handles
        // (Output ends the command quietly when standard output has gone; Redis, TLS and
        // libcurl report a closed peer), never a signal that kills mid-record.
        signal(SIGPIPE, SIG_IGN)
        // Started with standard input, output or error closed (`2>&-`): the first file or
        // socket opened would take that number, and log lines would go into it (serve's
        // Redis connection, an output file). /dev/null holds each closed one first.
        for descriptor in Int32(0)...2 where fcntl(descriptor, F_GETFD) < 0 && errno == EBADF {
            guard open("/dev/null", O_RDWR) == descriptor else { _exit(ExitStatus.usage.rawValue) }
        }
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard let subcommand = arguments.first else {
            Output.error(usage)
            exit(ExitStatus.usage.rawValue)
        }
        arguments.removeFirst()
        if subcommand == "--help" || subcommand == "-h" || subcommand == "help" {
            Output.line(usage)
            exit(ExitStatus.success.rawValue)
        }
        if subcommand == "--version" {
            Output.line("siwa-endpoint \(EndpointVersion.current)")
            exit(ExitStatus.success.rawValue)
        }
        let status: ExitStatus
        do {
            switch subcommand {
            case "serve": status = try ServeCommand.run(arguments)
            case "keygen": status = try KeygenCommand.run(arguments)
            case "sign": status = try SignCommand.run(arguments)
            case "verify": status = try VerifyCommand.run(arguments)
            case "bench": status = try BenchCommand.run(arguments)
            case "load": status = try LoadCommand.run(arguments)
            case "user": status = try UserCommand.run(arguments)
            case "status": status = try StatusCommand.run(arguments)
            case "spool": status = try SpoolCommand.run(arguments)
            case "reconcile": status = try ReconcileCommand.run(arguments)
            case "revoke": status = try RevokeCommand.run(arguments)
            case "deletions": status = try DeletionsCommand.run(arguments)
            case "transfer": status = try TransferCommand.run(arguments)
            case "canary": status = try CanaryCommand.run(arguments)
            case "deliver": status = try DeliverCommand.run(arguments)
            case "google": status = try GoogleCommand.run(arguments)
            default: throw UsageError("unknown subcommand \(subcommand)\n\n\(usage)")
            }
        } catch let error as UsageError {
            Output.error("siwa-endpoint \(subcommand): \(error.description)")
            exit(ExitStatus.usage.rawValue)
        } catch {
            Output.error("siwa-endpoint \(subcommand): \(error)")
            exit(ExitStatus.failed.rawValue)
        }
        exit(status.rawValue)
    }
}

/// Every byte the commands write to standard output and standard error, with write(2)
/// (FileHandle.write traps on a failed write).
///
/// Standard output closed under a command (`siwa-endpoint transfer export ... | head -1`):
/// the command ends at once, quietly, with `closedPipeStatus`, what a shell reports for a
/// command a closed pipe ended; every record already made is whole (each command writes a
/// line only after its work for that line is done). Standard error closed: its lines are
/// dropped and the command goes on, as serve's log lines are.
enum Output {
    /// 128 + SIGPIPE.
    static let closedPipeStatus = ExitStatus.closedPipe.rawValue

    static func line(_ text: String) {
        write(text + "\n")
    }

    /// `text` as it is, on standard output.
    static func write(_ text: String) {
        guard let failure = writeAll(1, Array(text.utf8)) else { return }
        if failure == EPIPE { _exit(closedPipeStatus) }
        _ = writeAll(
            2, Array("siwa-endpoint: writing standard output failed: \(String(cString: strerror(failure)))\n".utf8))
        _exit(ExitStatus.failed.rawValue)
    }

    /// One JSON object on one line of standard output: the one way every command writes
    /// JSON (a `--json` document, a result line of a batch run).
    static func json(_ members: [(String, JSONValue)]) {
        line(JSONWriter.object(members))
    }

    static func error(_ text: String) {
        _ = writeAll(2, Array((text + "\n").utf8))
    }

    /// `text` as it is (a progress line rewritten in place), on standard error.
    static func progress(_ text: String) {
        _ = writeAll(2, Array(text.utf8))
    }

    /// Writes every byte to `descriptor`; the errno that stopped it, or nil.
    private static func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Int32? {
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else {
                    return written < 0 ? errno : EIO
                }
            }
            return nil
        }
    }
}

extension CommandOutput {
    /// The binary's: through `Output`, the progress line only on a terminal.
    static let standard = CommandOutput(
        line: { Output.line($0) }, error: { Output.error($0) }, progress: { Output.progress($0) },
        showsProgress: isatty(2) == 1)
}
