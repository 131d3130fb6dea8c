import Foundation
import SIWAJSON
import SIWAServer
import SIWAVerification

/// `spool status` and `spool requeue`: look into a spool directory, and put set-aside
/// records back in line, with or without a running `serve`.
enum SpoolCommand {
    static let help = """
        usage: siwa-endpoint spool status  [--spool-dir DIR]
               siwa-endpoint spool requeue [--spool-dir DIR]

        The spool directory is --spool-dir, else SIWA_SPOOL_DIR, else
        /var/lib/siwa-endpoint/spool. Each prints one JSON object.

        status   records waiting (depth), the age of the oldest one in seconds,
                 records set aside in rejected/ (Redis refused them for a reason about
                 the record), and the torn files (damaged bytes) and their size.
        requeue  puts every set-aside record back in line, behind the records waiting
                 now, once the cause is fixed. A running serve applies them within a
                 second; a stopped one at its next start. Safe to run at any time: each
                 file moves by one atomic rename, so no record is applied twice.
        """

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(words, valueOptions: ["--spool-dir"])
        guard arguments.positionals.count == 1, let action = arguments.positionals.first else {
            throw UsageError("spool takes one action, status or requeue\n\n\(help)")
        }
        let directory =
            arguments.value("--spool-dir") ?? ProcessInfo.processInfo.environment["SIWA_SPOOL_DIR"]
            ?? "/var/lib/siwa-endpoint/spool"
        do {
            switch action {
            case "status":
                let status = try SpoolInspector.status(spoolDirectory: directory)
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                let age: JSONValue = status.oldestSpooledAt.map { .integer(max(0, now - $0) / 1000) } ?? .null
                Output.line(
                    JSONWriter.object([
                        ("spool_dir", .string(directory)), ("depth", .integer(Int64(status.depth))),
                        ("oldest_age_seconds", age), ("set_aside", .integer(Int64(status.setAside))),
                        ("torn_files", .integer(Int64(status.tornFiles))),
                        ("torn_bytes", .integer(Int64(status.tornBytes))),
                    ]))
            case "requeue":
                let requeued = try SpoolInspector.requeue(spoolDirectory: directory)
                Output.line(
                    JSONWriter.object([
                        ("spool_dir", .string(directory)), ("requeued", .integer(Int64(requeued.records))),
                        ("files", .integer(Int64(requeued.files))),
                    ]))
            default:
                throw UsageError("unknown action \(action): status or requeue")
            }
        } catch let error as SpoolError {
            Output.error("siwa-endpoint spool \(action): \(error.description)")
            return 1
        }
        return 0
    }
}
