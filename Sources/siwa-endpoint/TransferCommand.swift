import Foundation
import SIWAAppleAPI
import SIWAHTTPS
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWAStore
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

        One JSON line per user on standard output: {"line","outcome",...} with outcome
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

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(
            words,
            valueOptions: ["--env-file", "--rate", "--target", "--client-id", "--out", "--transfer-date"],
            flagOptions: ["--correct"])
        guard arguments.positionals.count == 2,
            let direction = TransferStore.Direction(rawValue: arguments.positionals[0])
        else {
            throw UsageError("transfer takes export or import, then one FILE (or - for standard input)\n\n\(help)")
        }
        let input = arguments.positionals[1]
        var target: String?
        if direction == .export {
            guard let value = arguments.value("--target") else { throw UsageError("export needs --target TEAM_ID") }
            guard ReconcileConfiguration.isAppleIdentifier(value) else {
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
                "--transfer-date \(UserCommand.utcDate(date).prefix(10)) is after today: import only once the "
                    + "transfer has completed (Apple refuses every user before)")
        }
        if arguments.has("--correct"), date == nil, target == nil {
            throw UsageError("--correct replaces the recorded --transfer-date or --target: give the right one")
        }
        let rate = try ReconcileCommand.rate(arguments)
        guard let configuration = ReconcileCommand.loadConfiguration(arguments),
            let file = ReconcileCommand.openInput(input, command: "transfer")
        else { return 2 }
        let entries = readEntries(file)
        fclose(file)
        guard let entries else {
            Output.error("siwa-endpoint transfer: reading \(input) failed")
            return 1
        }
        let run = TransferRun(
            direction: direction, target: target, clientID: clientID, configuration: configuration, rate: rate)
        return run.run(entries, date: date, correcting: arguments.has("--correct"), outDirectory: outDirectory)
    }

    /// Every non-blank line, trimmed, with its number; nil when reading failed.
    static func readEntries(_ file: UnsafeMutablePointer<FILE>) -> [(line: Int, identifier: String)]? {
        var entries: [(line: Int, identifier: String)] = []
        let failed = InputLines.each(file, failed: { _ in 1 }) { bytes, lineNumber in
            let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespaces)
            entries.append((lineNumber, text))
            return nil
        }
        return failed == nil ? entries : nil
    }

    /// `YYYY-MM-DD` as Unix milliseconds at 00:00 UTC.
    static func parseDate(_ text: String) throws(UsageError) -> Int64 {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            let year = Int32(parts[0]), let month = Int32(parts[1]), let day = Int32(parts[2]),
            (2000...2100).contains(year), (1...12).contains(month), (1...31).contains(day)
        else { throw UsageError("--transfer-date must be a day such as 2026-11-30, got \(text)") }
        var fields = tm()
        fields.tm_year = year - 1900
        fields.tm_mon = month - 1
        fields.tm_mday = day
        let seconds = timegm(&fields)
        guard fields.tm_mday == day else { throw UsageError("--transfer-date \(text) is not a day of the calendar") }
        return Int64(seconds) * 1000
    }
}

/// The run's `--out` directory, opened once: every file is opened through this descriptor,
/// so the path cannot be swapped under the run. Created 0700 when missing; refused unless
/// it belongs to the user running the command and neither its group nor others can write
/// to it (a directory someone else made could hold their links and files).
private final class OutputDirectory {
    struct Refusal: Error {
        let message: String
    }

    let path: String
    let descriptor: Int32

    init(_ path: String) throws(Refusal) {
        self.path = path
        if mkdir(path, 0o700) != 0, errno != EEXIST {
            let reason = Self.reason(errno)
            throw Refusal(
                message: "cannot create \(path): \(reason) (make it first, owned by the user that runs the command, "
                    + "mode 0700, or name a directory that user may create)")
        }
        // The directory itself, never a link to one: a link planted where --out names a
        // directory in /tmp would send the files into any directory of the user (root's
        // /etc/...). A trailing slash would make open follow the link, so it is dropped.
        var named = path
        while named.count > 1, named.hasSuffix("/") { named.removeLast() }
        descriptor = open(named, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else {
            let reason =
                errno == ELOOP || errno == ENOTDIR && Self.isLink(named)
                ? "it is a symbolic link (name the directory itself)" : Self.reason(errno)
            throw Refusal(message: "cannot open \(path): \(reason)")
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let reason = Self.reason(errno)
            close(descriptor)
            throw Refusal(message: "cannot read \(path): \(reason)")
        }
        let user = geteuid()
        if status.st_uid != user || status.st_mode & 0o022 != 0 {
            close(descriptor)
            throw Refusal(
                message: "\(path) belongs to uid \(status.st_uid) with mode "
                    + "\(String(status.st_mode & 0o7777, radix: 8)): --out must be a directory of the user running the "
                    + "command (uid \(user)) that no one else can write to")
        }
    }

    deinit { close(descriptor) }

    /// `name` in the directory, opened without following a link: an existing file must be a
    /// regular file of this user with one link (an earlier run's), else one is created
    /// (`O_EXCL`); either way its mode is then set to `mode`.
    func file(_ name: String, mode: mode_t) throws(Refusal) -> AppendedLines {
        let path = (self.path as NSString).appendingPathComponent(name)
        var descriptor = openat(self.descriptor, name, O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC)
        if descriptor < 0, errno == ENOENT {
            descriptor = openat(
                self.descriptor, name, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        }
        guard descriptor >= 0 else {
            let reason = errno == ELOOP ? "it is a symbolic link" : Self.reason(errno)
            throw Refusal(message: "cannot open \(path): \(reason)")
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == geteuid(),
            status.st_nlink == 1, fchmod(descriptor, mode) == 0
        else {
            close(descriptor)
            throw Refusal(message: "\(path) is not a regular file of the user running the command with one link")
        }
        guard let file = AppendedLines(path: path, descriptor: descriptor) else {
            throw Refusal(message: "cannot read or complete \(path)")
        }
        return file
    }

    static func reason(_ code: Int32) -> String { String(cString: strerror(code)) }

    static func isLink(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFLNK
    }
}

/// One line file the run appends whole lines to, each written with one `write` and synced
/// before Redis records the user, so a killed run leaves whole lines only.
private final class AppendedLines {
    let path: String
    private let descriptor: Int32
    /// The lines the file holds (an earlier run's, and this run's), so none is added twice.
    private(set) var lines: Set<String>

    /// Takes `descriptor` (opened for reading and appending) and reads what it holds.
    init?(path: String, descriptor: Int32) {
        self.path = path
        self.descriptor = descriptor
        var existing: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes {
                pread(descriptor, $0.baseAddress, $0.count, off_t(existing.count))
            }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else {
                close(descriptor)
                return nil
            }
            if count == 0 { break }
            existing += buffer.prefix(count)
        }
        lines = Set(existing.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) })
        // A line cut short by a kill: ended, so the next line stands on its own.
        if let last = existing.last, last != UInt8(ascii: "\n"), !write("") { return nil }
    }

    deinit { close(descriptor) }

    /// Appends `line` unless the file holds it; false when the write or the sync failed.
    func append(_ line: String) -> Bool {
        guard !lines.contains(line) else { return true }
        guard write(line) else { return false }
        lines.insert(line)
        return true
    }

    /// Empties the file (its lines were for another target team); false when that failed.
    func startOver() -> Bool {
        guard ftruncate(descriptor, 0) == 0, fsync(descriptor) == 0 else { return false }
        lines = []
        return true
    }

    private func write(_ line: String) -> Bool {
        let bytes = Array((line + "\n").utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        return written == bytes.count && fsync(descriptor) == 0
    }
}

/// One transfer run, export or import.
private final class TransferRun {
    struct Stop: Error {
        let status: Int32
        let message: String
    }

    let direction: TransferStore.Direction
    let target: String?
    let clientID: String
    let configuration: ReconcileConfiguration
    let store: TransferStore
    let migration: AppleUserMigration
    let progress = isatty(2) == 1
    var counts: [String: Int] = [:]
    let started = ContinuousClock.now
    var toDo = 0
    var handled = 0
    /// The settings an `apple_unreachable` line already named (one line each per run).
    var unreachableNamed: Set<String> = []

    static let outcomes = ["exported", "exchanged", "refused", "unknown", "skipped", "malformed"]

    init(
        direction: TransferStore.Direction, target: String?, clientID: String, configuration: ReconcileConfiguration,
        rate: Double
    ) {
        self.direction = direction
        self.target = target
        self.clientID = clientID
        self.configuration = configuration
        store = TransferStore(
            connection: OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix),
            keyPrefix: configuration.keyPrefix, clientID: clientID)
        migration = AppleUserMigration(
            migrationURL: configuration.migrationURL, clientID: clientID,
            client: ReconcileCommand.appleClient(configuration, pacer: ReconcileCommand.pacer(rate: rate)))
    }

    var name: String { "transfer \(direction.rawValue)" }

    func run(_ entries: [(line: Int, identifier: String)], date: Int64?, correcting: Bool, outDirectory: String)
        -> Int32
    {
        do {
            try refuseClosedWindow(date)
            warnOfMixedURLs()
            // The directory and its files before Redis: a refusal here records nothing, not
            // even the date.
            let directory: OutputDirectory
            do {
                directory = try OutputDirectory(outDirectory)
            } catch {
                throw Stop(status: 2, message: error.message)
            }
            let files = try openFiles(directory)
            let window = try self.window(date, correcting: correcting) {
                // Their lines are for the team this run replaces: the hand-off starts anew,
                // before Redis holds the new team (a run killed in between starts it anew
                // again; users done for the old team are exported again, those done for the
                // new one have their lines written again from Redis).
                for file in files where !file.startOver() {
                    throw Stop(status: 1, message: "emptying \(file.path) failed; the run stopped")
                }
            }
            let done = try markPending(entries, legacyTarget: window.legacyTarget, expiresAt: window.expiresAt)
            toDo = entries.count - done.count
            EventLog.event(
                "transfer_started",
                [
                    ("direction", .string(direction.rawValue)), ("client_id", .string(clientID)),
                    ("team_id", .string(configuration.teamID)), ("users", .integer(Int64(entries.count))),
                    ("already_done", .integer(Int64(done.count))), ("transfer_date", .integer(window.date)),
                    ("closes_at", .integer(window.date + TransferStore.window.wholeMilliseconds)),
                ] + (target.map { [("target", JSONValue.string($0))] } ?? []))
            for entry in entries {
                if let answer = done[entry.identifier] {
                    if direction == .export, UserKeyPart.isValidSubject(answer) {
                        // Its lines again where the files lack them (another --out, a corrected target).
                        try write(
                            files, exportLines(subject: entry.identifier, transferSubject: answer), line: entry.line)
                    }
                    if direction == .import, UserKeyPart.isValidSubject(answer), let mapping = files.first,
                        !mapped(in: mapping).contains(entry.identifier)
                    {
                        // Its mapping line is not in the file (another --out, a file emptied or
                        // lost): Redis does not keep the address, so Apple is asked again for
                        // the line; Redis already holds the user and is left as it is.
                        try writeImportLineAgain(entry, subject: answer, file: mapping)
                        continue
                    }
                    counts["skipped", default: 0] += 1
                    report([("line", .integer(Int64(entry.line))), (idName, .string(entry.identifier))], "skipped")
                    continue
                }
                try process(entry, files: files, expiresAt: window.expiresAt)
                handled += 1
                showProgress()
            }
        } catch let stop as Stop {
            finish()
            Output.error("siwa-endpoint \(name): \(stop.message)")
            return stop.status
        } catch {
            finish()
            return 1
        }
        finish()
        warnIfEveryUserRefused()
        let unfinished = (counts["refused"] ?? 0) + (counts["unknown"] ?? 0) + (counts["malformed"] ?? 0)
        return unfinished > 0 ? 1 : 0
    }

    /// The identifier's name in the output: the input's kind of identifier.
    var idName: String { direction == .export ? "sub" : "transfer_sub" }

    /// A date whose window has closed is refused before anything is created or recorded.
    private func refuseClosedWindow(_ date: Int64?) throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        if let date, now >= date + TransferStore.window.wholeMilliseconds {
            throw Stop(
                status: 2,
                message: "the transfer window of a transfer on \(UserCommand.utcDate(date)) closed at "
                    + "\(UserCommand.utcDate(date + TransferStore.window.wholeMilliseconds)): Apple no longer "
                    + "exchanges its identifiers")
        }
    }

    /// One of Apple's two URLs moved to a stand-in or proxy and the other left at Apple's
    /// address is almost always a forgotten setting: said before any request.
    private func warnOfMixedURLs() {
        let tokenIsApple = configuration.tokenURL == ReconcileConfiguration.defaultTokenURL
        let migrationIsApple = configuration.migrationURL == AppleUserMigration.defaultMigrationURL
        guard tokenIsApple != migrationIsApple else { return }
        log(
            "apple_urls_differ", level: "warning",
            [
                (
                    "message",
                    .string("SIWA_APPLE_TOKEN_URL and SIWA_APPLE_MIGRATION_URL name different servers: set both")
                ),
                ("token_url", .string(configuration.tokenURL)), ("migration_url", .string(configuration.migrationURL)),
            ])
    }

    /// What the run works with: the transfer date recorded, the records' expiry, and the
    /// target team a record naming none was made for.
    struct Window {
        let date: Int64
        let expiresAt: Int64
        let legacyTarget: String?
    }

    /// Records `date` and the target on the first run, or replaces them when `correcting`
    /// (calling `beforeReplacingTarget` first when the target changes); refuses another date
    /// or target without it.
    private func window(_ date: Int64?, correcting: Bool, beforeReplacingTarget: () throws -> Void) throws -> Window {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let recorded: (date: Int64?, target: String?)
        let stored: Int64?
        do {
            recorded = try store.recordedWindow()
            if let date, let recordedDate = recorded.date, date != recordedDate, !correcting {
                throw Stop(
                    status: 2,
                    message: "the transfer date recorded for \(clientID) is \(UserCommand.utcDate(recordedDate)), "
                        + "not \(UserCommand.utcDate(date)): it is recorded once; if it was mistyped, run again with "
                        + "--correct and the right --transfer-date")
            }
            if let target, let recordedTarget = recorded.target, target != recordedTarget, !correcting {
                throw Stop(
                    status: 2,
                    message: "the users of \(clientID) were exported for team \(recordedTarget), not \(target); if "
                        + "\(recordedTarget) was a mistake, run again with --correct: every user is exported again for "
                        + "\(target) and the export files are written anew (hand over only the new transfer-ids.txt)")
            }
            if correcting, let target, let recordedTarget = recorded.target, target != recordedTarget {
                try beforeReplacingTarget()
            }
            stored = try store.recordWindow(date: date, target: target, replacing: correcting, at: now)
        } catch let error as RedisError {
            throw redisStop(error, "before anything was recorded")
        }
        guard let stored else {
            throw Stop(
                status: 2, message: "no transfer date is recorded for \(clientID): give --transfer-date YYYY-MM-DD")
        }
        let targetReplaced = correcting && recorded.target != nil && target != nil && recorded.target != target
        if correcting, stored != recorded.date || targetReplaced {
            log(
                "transfer_corrected", level: "warning",
                [("client_id", .string(clientID))]
                    + (recorded.date.map { [("transfer_date_was", JSONValue.integer($0))] } ?? [])
                    + [("transfer_date", .integer(stored))]
                    + (targetReplaced
                        ? [("target_was", .string(recorded.target ?? "")), ("target", .string(target ?? ""))] : []))
        }
        let closesAt = stored + TransferStore.window.wholeMilliseconds
        if now >= closesAt {
            throw Stop(
                status: 2,
                message: "the transfer window of \(clientID) closed at \(UserCommand.utcDate(closesAt)): "
                    + "Apple no longer exchanges its identifiers")
        }
        return Window(
            date: stored, expiresAt: stored + TransferStore.recordLifetime.wholeMilliseconds,
            legacyTarget: recorded.target ?? target)
    }

    /// Adds every identifier not done yet to the pending set; returns those done, with their
    /// answer (the transfer identifier, or the new `sub`).
    private func markPending(_ entries: [(line: Int, identifier: String)], legacyTarget: String?, expiresAt: Int64)
        throws -> [String: String]
    {
        var done: [String: String] = [:]
        for entry in entries where UserKeyPart.isValidSubject(entry.identifier) {
            do {
                if let answer = try store.markPending(
                    entry.identifier, direction: direction, target: target, legacyTarget: legacyTarget,
                    expiresAt: expiresAt)
                {
                    done[entry.identifier] = answer
                }
            } catch {
                throw redisStop(error, "before any user was sent to Apple")
            }
        }
        return done
    }

    /// The run's files in `directory`.
    private func openFiles(_ directory: OutputDirectory) throws -> [AppendedLines] {
        let names: [(String, mode_t)] =
            direction == .export
            ? [("transfer-ids.txt", 0o644), ("export-mapping.jsonl", 0o600)] : [("import-mapping.jsonl", 0o600)]
        var files: [AppendedLines] = []
        for (name, mode) in names {
            do {
                files.append(try directory.file(name, mode: mode))
            } catch {
                throw Stop(status: 2, message: error.message)
            }
        }
        return files
    }

    /// An exported user's lines: the transfer identifier (to hand over), the mapping (kept).
    private func exportLines(subject: String, transferSubject: String) -> [String] {
        [
            transferSubject,
            JSONWriter.object([("sub", .string(subject)), ("transfer_sub", .string(transferSubject))]),
        ]
    }

    /// Every user asked was refused: the shape of an import run before the transfer
    /// completed (or an export for a team or client Apple does not know); said once, plainly.
    private func warnIfEveryUserRefused() {
        let refused = counts["refused"] ?? 0
        let answered = refused + (counts["exported"] ?? 0) + (counts["exchanged"] ?? 0)
        guard refused > 0, refused == answered else { return }
        let why =
            direction == .import
            ? "if the transfer has not completed yet, Apple refuses every user: rerun once it has"
            : "check --target (the recipient's team ID) and --client-id"
        log("transfer_every_user_refused", level: "warning", [("refused", .integer(Int64(refused)))])
        Output.error(
            "siwa-endpoint \(name): Apple refused every user asked (\(refused)): \(why) (refused users are asked again)"
        )
    }

    private func process(_ entry: (line: Int, identifier: String), files: [AppendedLines], expiresAt: Int64) throws {
        var result: [(String, JSONValue)] = [
            ("line", .integer(Int64(entry.line))), (idName, .string(entry.identifier)),
        ]
        guard UserKeyPart.isValidSubject(entry.identifier), !entry.identifier.contains(" ") else {
            counts["malformed", default: 0] += 1
            result[1] = (idName, .string(""))
            report(result + [("reason", .string("not_an_identifier"))], "malformed")
            return
        }
        let verdict =
            direction == .export
            ? migration.export(subject: entry.identifier, target: target ?? "")
            : migration.importUser(transferSubject: entry.identifier)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        switch verdict {
        case .exchanged(let answer):
            if direction == .export {
                let transferSubject = answer["transfer_sub"] ?? ""
                try write(
                    files, exportLines(subject: entry.identifier, transferSubject: transferSubject), line: entry.line)
                do {
                    try store.recordExport(
                        subject: entry.identifier, target: target ?? "", transferSubject: transferSubject, error: nil,
                        at: now, expiresAt: expiresAt)
                } catch {
                    throw redisStop(error, "at line \(entry.line), after its lines were written")
                }
                counts["exported", default: 0] += 1
                report(result, "exported")
            } else {
                try recordExchange(entry, answer: answer, files: files, result: result, now: now, expiresAt: expiresAt)
            }
        case .refused(let code):
            try write(
                files.suffix(1), [JSONWriter.object([(idName, .string(entry.identifier)), ("error", .string(code))])],
                line: entry.line)
            do {
                if direction == .export {
                    try store.recordExport(
                        subject: entry.identifier, target: target ?? "", transferSubject: nil, error: code, at: now,
                        expiresAt: expiresAt)
                } else {
                    _ = try store.recordImport(
                        transferSubject: entry.identifier, subject: nil, error: code, fromSubject: nil, at: now,
                        expiresAt: expiresAt)
                }
            } catch {
                throw redisStop(error, "at line \(entry.line), after its line was written")
            }
            counts["refused", default: 0] += 1
            report(result + [("error", .string(code))], "refused")
        case .unknown(let reason):
            nameUnreachableSetting(reason)
            counts["unknown", default: 0] += 1
            report(result + [("reason", .string(reason))], "unknown")
            if reason == "http_429" || reason == "token_http_429" {
                // A 429 each time, after each Retry-After: the next user would meet the same,
                // at a pace halved each time; the run stops rather than go on for days.
                log("transfer_throttled", level: "error", [("line", .integer(Int64(entry.line)))])
                throw Stop(
                    status: 1,
                    message: "Apple answered 429 (too many requests) \(AppleTokenCheck.throttledAttempts) times in a "
                        + "row at line \(entry.line), each after its Retry-After: the run stopped; rerun later "
                        + "(done users are skipped)")
            }
        case .configurationError(let code):
            log(
                "transfer_client_refused", level: "error",
                [("line", .integer(Int64(entry.line))), ("client_id", .string(clientID)), ("error", .string(code))])
            throw Stop(
                status: 2,
                message: "Apple refused the client (\(code)) for client ID \(clientID) at line \(entry.line): "
                    + "check SIWA_APPLE_TEAM_ID, SIWA_APPLE_KEY_ID, SIWA_APPLE_PRIVATE_KEY_FILE and the client ID")
        case .tokenRefused:
            log("transfer_token_refused", level: "error", [("line", .integer(Int64(entry.line)))])
            throw Stop(
                status: 1,
                message: "Apple refused a freshly renewed access token (invalid_grant) at line \(entry.line): "
                    + "the transfer window may have closed; the run stopped (rerun: done users are skipped)")
        }
    }

    /// The transfer identifiers the import mapping file holds a `sub` for (read once).
    private var mappedTransferSubjects: Set<String>?

    private func mapped(in file: AppendedLines) -> Set<String> {
        if let mappedTransferSubjects { return mappedTransferSubjects }
        var found: Set<String> = []
        for line in file.lines {
            guard case .object(let members)? = try? StrictJSONParser.parse(Array(line.utf8)),
                case .string(let transferSubject)? = members["transfer_sub"], members["sub"] != nil
            else { continue }
            found.insert(transferSubject)
        }
        mappedTransferSubjects = found
        return found
    }

    /// A user an earlier import exchanged whose mapping line `file` lacks: asked again, the
    /// line written again (`"written_again": true`) when Apple gives the `sub` Redis holds.
    private func writeImportLineAgain(_ entry: (line: Int, identifier: String), subject: String, file: AppendedLines)
        throws
    {
        let result: [(String, JSONValue)] = [
            ("line", .integer(Int64(entry.line))), (idName, .string(entry.identifier)),
        ]
        switch migration.importUser(transferSubject: entry.identifier) {
        case .exchanged(let answer) where answer["sub"] == subject:
            let fromSubject: String?
            do {
                fromSubject = try store.exportedSubject(transferSubject: entry.identifier)
            } catch {
                throw redisStop(error, "at line \(entry.line), before its line was written again")
            }
            var mapping: [(String, JSONValue)] = [
                ("transfer_sub", .string(entry.identifier)), ("sub", .string(subject)),
            ]
            if let email = answer["email"] { mapping.append(("email", .string(email))) }
            if let flag = answer["is_private_email"] { mapping.append(("is_private_email", .bool(flag == "true"))) }
            if let fromSubject { mapping.append(("from_sub", .string(fromSubject))) }
            try write([file], [JSONWriter.object(mapping)], line: entry.line)
            mappedTransferSubjects?.insert(entry.identifier)
            counts["skipped", default: 0] += 1
            report(result + [("sub", .string(subject)), ("written_again", .bool(true))], "skipped")
        case .configurationError(let code):
            throw Stop(
                status: 2,
                message: "Apple refused the client (\(code)) for client ID \(clientID) at line \(entry.line): "
                    + "check SIWA_APPLE_TEAM_ID, SIWA_APPLE_KEY_ID, SIWA_APPLE_PRIVATE_KEY_FILE and the client ID")
        case .unknown(let reason):
            counts["unknown", default: 0] += 1
            report(result + [("reason", .string("mapping_line_not_written_again_" + reason))], "unknown")
        default:
            counts["unknown", default: 0] += 1
            report(result + [("reason", .string("mapping_line_not_written_again"))], "unknown")
        }
    }

    private func recordExchange(
        _ entry: (line: Int, identifier: String), answer: [String: String], files: [AppendedLines],
        result: [(String, JSONValue)], now: Int64, expiresAt: Int64
    ) throws {
        let subject = answer["sub"] ?? ""
        let fromSubject: String?
        do {
            fromSubject = try store.exportedSubject(transferSubject: entry.identifier)
        } catch {
            throw redisStop(error, "at line \(entry.line), before its line was written")
        }
        var mapping: [(String, JSONValue)] = [("transfer_sub", .string(entry.identifier)), ("sub", .string(subject))]
        if let email = answer["email"] { mapping.append(("email", .string(email))) }
        if let flag = answer["is_private_email"] { mapping.append(("is_private_email", .bool(flag == "true"))) }
        if let fromSubject { mapping.append(("from_sub", .string(fromSubject))) }
        try write(files, [JSONWriter.object(mapping)], line: entry.line)
        let found: TransferStore.Found?
        do {
            found = try store.recordImport(
                transferSubject: entry.identifier, subject: subject, error: nil, fromSubject: fromSubject, at: now,
                expiresAt: expiresAt)
        } catch {
            throw redisStop(error, "at line \(entry.line), after its line was written")
        }
        counts["exchanged", default: 0] += 1
        var line = result + [("sub", .string(subject))]
        if let fromSubject { line.append(("from_sub", .string(fromSubject))) }
        let held = (found?.fields ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, JSONValue.string($0.value)) }
        line += [
            ("held", .object(Dictionary(uniqueKeysWithValues: held))),
            ("deletion_queued", .bool(found?.deletionQueued ?? false)),
        ]
        report(line, "exchanged")
    }

    /// Apple not reached (a name that does not resolve, a refused connection, a certificate
    /// not trusted): once per run, the setting that names the URL (and the CA file's), since
    /// a stand-in's token URL with Apple's migration URL left unset looks just like an outage.
    private func nameUnreachableSetting(_ reason: String) {
        let code = reason.hasPrefix("token_") ? String(reason.dropFirst("token_".count)) : reason
        guard !code.hasPrefix("http_"), code != "answer_invalid" else { return }
        let (setting, url) =
            reason.hasPrefix("token_")
            ? ("SIWA_APPLE_TOKEN_URL", configuration.tokenURL)
            : ("SIWA_APPLE_MIGRATION_URL", configuration.migrationURL)
        guard unreachableNamed.insert(setting).inserted else { return }
        let tls = code.hasPrefix("tls_") || code == "ca_file_unusable"
        log(
            "apple_unreachable", level: "error",
            [
                ("setting", .string(setting)), ("url", .string(url)), ("reason", .string(code)),
                (
                    "message",
                    .string(
                        "\(setting) could not be reached (\(code)): check it"
                            + (tls ? " and SIWA_APPLE_CA_FILE" : ""))
                ),
            ])
    }

    /// Appends `lines` to `files` in order (one each), synced; a failure stops the run.
    private func write(_ files: some Collection<AppendedLines>, _ lines: [String], line: Int) throws {
        for (file, text) in zip(files, lines) where !file.append(text) {
            throw Stop(status: 1, message: "writing \(file.path) failed at line \(line); the run stopped")
        }
    }

    private func redisStop(_ error: RedisError, _ when: String) -> Stop {
        log(
            "redis_error", level: "error",
            [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
        return Stop(
            status: 3,
            message: "Redis failed (\(error.code.rawValue)) \(when); the run stopped: run it again once Redis "
                + "answers (done users are skipped)")
    }

    private func report(_ fields: [(String, JSONValue)], _ outcome: String) {
        if progress { Output.progress("\r\u{1B}[K") }
        var fields = fields
        fields.insert(("outcome", .string(outcome)), at: 2)
        Output.line(JSONWriter.object(fields))
    }

    private func log(_ event: String, level: String = "info", _ fields: [(String, JSONValue)]) {
        if progress { Output.progress("\r\u{1B}[K") }
        EventLog.event(event, level: level, fields)
    }

    private func showProgress() {
        guard progress, toDo > 0 else { return }
        let elapsed = Double((ContinuousClock.now - started).components.seconds)
        let left = Int(elapsed / Double(max(1, handled)) * Double(toDo - handled))
        let estimate = left >= 3600 ? "\(left / 3600)h\(left % 3600 / 60)m" : "\(left / 60)m\(left % 60)s"
        Output.progress("\r\u{1B}[K\(name): \(handled)/\(toDo), about \(estimate) left")
    }

    private func finish() {
        if progress { Output.progress("\r\u{1B}[K") }
        let unfinished = (counts["refused"] ?? 0) + (counts["unknown"] ?? 0) + (counts["malformed"] ?? 0)
        EventLog.event(
            "transfer_finished", level: unfinished > 0 ? "warning" : "info",
            [("direction", .string(direction.rawValue))]
                + Self.outcomes.map { ($0, .integer(Int64(counts[$0] ?? 0))) }
                + [("access_tokens", .integer(Int64(migration.tokensObtained)))])
    }
}
