import Foundation
import SIWAAppleAPI
import SIWAHTTPS
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWAVerification

#if canImport(Glibc)
    import Glibc
#endif

/// `transfer export` and `transfer import`: Apple's user migration for an app moved to
/// another team (TN3159). See docs/transfer.md.
enum TransferCommand {
    static let help = """
        usage: siwa-endpoint transfer export --target TEAM_ID --client-id CLIENT_ID --out DIR
                                             [--transfer-date YYYY-MM-DD] [--correct] [--rate N]
                                             [--env-file FILE] FILE
               siwa-endpoint transfer import --client-id CLIENT_ID --out DIR
                                             [--transfer-date YYYY-MM-DD] [--correct] [--rate N]
                                             [--env-file FILE] FILE

        export (the sending team, with its key): FILE (or - for standard input) holds the
          users' sub, one a line. Each is exchanged at Apple for the transfer identifier of
          the recipient team TEAM_ID. Writes DIR/transfer-ids.txt (transfer identifiers
          only: the file to hand to the recipient) and DIR/export-mapping.jsonl (mode 0600:
          {"sub","transfer_sub"} or {"sub","error"}: keep it, never hand it over).
        import (the recipient team, with its key, once the transfer has completed: Apple
          refuses every user before): FILE holds transfer identifiers, one a line. Each is
          exchanged for the new sub (and the new email where there is one). Writes
          DIR/import-mapping.jsonl (mode 0600: {"transfer_sub","sub","email",
          "is_private_email","from_sub"} or {"transfer_sub","error"}) for the team's
          database, and records transfer_sub -> sub in Redis; where the export ran against
          the same Redis (one organisation), also links the old sub (from_sub) to the new one.

        One JSON line per user on standard output (with or without --json, accepted as by
        every command that reports): {"line","outcome",...} with outcome
        exported, exchanged, refused (Apple's "error", such as invalid_request: a user who
        cannot be migrated, or every user of an import run before the transfer completed),
        unknown (a "reason", after the retries), skipped (done by an earlier run; its lines
        written again where DIR's files lack them, "written_again" on import) or
        malformed. A refused user is asked again by every rerun. An import line says what
        Redis already held under the new sub ("held": consent revoked, account deleted,
        forwarding).

        --out DIR        created (0700) when missing; refused unless it belongs to the user
                         running the command and no one else can write to it (never
                         a symbolic link to it)
        --transfer-date  the day the transfer completed (UTC): required on the first run of
                         the app, recorded once (import: not a day after today)
        --correct        replace the recorded transfer date or target team with the ones
                         given (a mistyped first run); with a new --target every user is
                         exported again for it and DIR's export files are written anew
        --rate N         at most N requests per second (default 5; from 0.01 to 100); a
                         429 holds every request for its Retry-After and halves the pace;
                         ten 429s in a row for one user stop the run (rerun later)

        Exit status: 0 every user exchanged (or done before); 1 some user refused, unknown
        or malformed, or a renewed access token refused; 2 a configuration or usage error
        (invalid_client included); 3 Redis did not answer (rerun: done users are skipped);
        141 standard output was closed (as by `| head`): the run stopped after whole records.

        settings: those of reconcile (see `siwa-endpoint reconcile --help`): the team's
          SIWA_APPLE_TEAM_ID, SIWA_APPLE_KEY_ID, SIWA_APPLE_PRIVATE_KEY_FILE,
          SIWA_APPLE_TOKEN_URL and SIWA_APPLE_CA_FILE, and
          SIWA_APPLE_MIGRATION_URL (default: \(AppleUserMigration.defaultMigrationURL)): set it
          beside SIWA_APPLE_TOKEN_URL when that does not name Apple
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words,
            valueOptions: ["--env-file", "--rate", "--target", "--client-id", "--out", "--transfer-date"],
            flagOptions: ["--correct", CommandLineArguments.json])
        guard arguments.positionals.count == 2,
            let direction = TransferStore.Direction(rawValue: arguments.positionals[0])
        else {
            throw UsageError("transfer takes export or import, then one FILE (or - for standard input)\n\n\(help)")
        }
        let input = arguments.positionals[1]
        var target: String?
        if direction == .export {
            guard let value = arguments.value("--target") else { throw UsageError("export needs --target TEAM_ID") }
            guard AppleAPIConfiguration.isAppleIdentifier(value) else {
                throw UsageError("--target must be 10 upper-case letters and digits, as Apple shows the team ID")
            }
            target = value
        } else if arguments.value("--target") != nil {
            throw UsageError("--target is for export only")
        }
        guard let clientID = arguments.value("--client-id"), UserKeyPart.isValidClientID(clientID) else {
            throw UsageError("--client-id CLIENT_ID is required: visible ASCII without { } or :")
        }
        guard let outDirectory = arguments.value("--out") else { throw UsageError("--out DIR is required") }
        let date = try arguments.value("--transfer-date").map(parseDate)
        if direction == .import, let date, date > Int64(Date().timeIntervalSince1970 * 1000) {
            // Apple answers the recipient only once the transfer has completed: asked before,
            // it refuses every user, and recording the day would start a window not yet open.
            throw UsageError(
                "--transfer-date \(UTCTime.day(milliseconds: date)) is after today: import only once the "
                    + "transfer has completed (Apple refuses every user before)")
        }
        if arguments.has("--correct"), date == nil, target == nil {
            throw UsageError("--correct replaces the recorded --transfer-date or --target: give the right one")
        }
        let rate = try ReconcileCommand.rate(arguments)
        guard let configuration = ReconcileCommand.loadConfiguration(arguments),
            let file = ReconcileCommand.openInput(input, command: "transfer")
        else { return .usage }
        let entries = readEntries(file)
        fclose(file)
        guard let entries else {
            Output.error("siwa-endpoint transfer: reading \(input) failed")
            return .failed
        }
        warnOfMixedURLs(configuration)
        let run = TransferRun(
            direction: direction, target: target, clientID: clientID, settings: configuration.runSettings,
            client: configuration.appleClient(rate: rate), output: .standard,
            connection: OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix))
        return run.run(entries, date: date, correcting: arguments.has("--correct"), outDirectory: outDirectory)
    }

    /// One of Apple's two URLs moved to a stand-in or proxy and the other left at Apple's
    /// address is almost always a forgotten setting: said before any request.
    static func warnOfMixedURLs(_ configuration: AppleAPIConfiguration) {
        let tokenIsApple = configuration.tokenURL == AppleAPIConfiguration.defaultTokenURL
        let migrationIsApple = configuration.migrationURL == AppleUserMigration.defaultMigrationURL
        guard tokenIsApple != migrationIsApple else { return }
        EventLog.event(
            "apple_urls_differ", level: "warning",
            [
                (
                    "message",
                    .string("SIWA_APPLE_TOKEN_URL and SIWA_APPLE_MIGRATION_URL name different servers: set both")
                ),
                ("token_url", .string(configuration.tokenURL)), ("migration_url", .string(configuration.migrationURL)),
            ])
    }

    /// Every non-blank line, trimmed, with its number; nil when reading failed.
    static func readEntries(_ file: UnsafeMutablePointer<FILE>) -> [(line: Int, identifier: String)]? {
        var entries: [(line: Int, identifier: String)] = []
        do throws(BatchRun.Stop) {
            try InputLines.each(file) { bytes, lineNumber throws(BatchRun.Stop) in
                entries.append(
                    (lineNumber, String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespaces)))
            }
        } catch {
            return nil
        }
        return entries
    }

    /// `YYYY-MM-DD` as Unix milliseconds at 00:00 UTC.
    static func parseDate(_ text: String) throws(UsageError) -> Int64 {
        guard let milliseconds = UTCTime.parseDay(text), text >= "2000-01-01", text <= "2100-12-31" else {
            throw UsageError("--transfer-date must be a day such as 2026-11-30, got \(text)")
        }
        return milliseconds
    }
}
