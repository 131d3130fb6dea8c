import Foundation
import SIWAJSON
import SIWARedis
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWAVerification

#if canImport(Glibc)
    import Glibc
#endif

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
public final class TransferRun {
    typealias Stop = BatchRun.Stop

    let direction: TransferStore.Direction
    let target: String?
    let clientID: String
    let settings: AppleRunSettings
    let store: TransferStore
    let migration: AppleUserMigration
    let batch: BatchRun
    /// The settings an `apple_unreachable` line already named (one line each per run).
    var unreachableNamed: Set<String> = []

    static let outcomes = ["exported", "exchanged", "refused", "unknown", "skipped", "malformed"]

    let output: CommandOutput

    /// `target`: export's recipient team. `connection`: serve's Redis, found as serve finds it.
    public init(
        direction: TransferStore.Direction, target: String?, clientID: String, settings: AppleRunSettings,
        client: AppleSignedPost, output: CommandOutput, connection: RedisConnection
    ) {
        self.direction = direction
        self.target = target
        self.clientID = clientID
        self.settings = settings
        self.output = output
        batch = BatchRun(
            name: "transfer \(direction.rawValue)", outcomes: Self.outcomes,
            finished: ["exported", "exchanged", "skipped"], output: output)
        store = TransferStore(connection: connection, keyPrefix: settings.keyPrefix, clientID: clientID)
        migration = AppleUserMigration(migrationURL: settings.migrationURL, clientID: clientID, client: client)
    }

    /// Exchanges `entries` (each non-blank input line, trimmed, with its number) at Apple,
    /// writing DIR's files and recording Redis; the exit status.
    public func run(_ entries: [(line: Int, identifier: String)], date: Int64?, correcting: Bool, outDirectory: String)
        -> ExitStatus
    {
        do {
            try refuseClosedWindow(date)
            // The directory and its files before Redis: a refusal here records nothing, not
            // even the date.
            let directory: OutputDirectory
            do {
                directory = try OutputDirectory(outDirectory)
            } catch {
                throw Stop(status: .usage, message: error.message)
            }
            let files = try openFiles(directory)
            let window = try self.window(date, correcting: correcting) {
                // Their lines are for the team this run replaces: the hand-off starts anew,
                // before Redis holds the new team (a run killed in between starts it anew
                // again; users done for the old team are exported again, those done for the
                // new one have their lines written again from Redis).
                for file in files where !file.startOver() {
                    throw Stop(status: .failed, message: "emptying \(file.path) failed; the run stopped")
                }
            }
            let done = try markPending(entries, legacyTarget: window.legacyTarget, expiresAt: window.expiresAt)
            batch.toDo = entries.count - done.count
            EventLog.event(
                "transfer_started",
                [
                    ("direction", .string(direction.rawValue)), ("client_id", .string(clientID)),
                    ("team_id", .string(settings.teamID)), ("users", .integer(Int64(entries.count))),
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
                    report([("line", .integer(Int64(entry.line))), (idName, .string(entry.identifier))], "skipped")
                    continue
                }
                try process(entry, files: files, expiresAt: window.expiresAt)
            }
        } catch let stop as Stop {
            finish()
            return batch.stopped(stop)
        } catch {
            finish()
            return .failed
        }
        finish()
        warnIfEveryUserRefused()
        return batch.status
    }

    /// The identifier's name in the output: the input's kind of identifier.
    var idName: String { direction == .export ? "sub" : "transfer_sub" }

    /// A date whose window has closed is refused before anything is created or recorded.
    private func refuseClosedWindow(_ date: Int64?) throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        if let date, now >= date + TransferStore.window.wholeMilliseconds {
            throw Stop(
                status: .usage,
                message: "the transfer window of a transfer on \(UTCTime.format(milliseconds: date)) closed at "
                    + "\(UTCTime.format(milliseconds: date + TransferStore.window.wholeMilliseconds)): Apple no longer "
                    + "exchanges its identifiers")
        }
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
                    status: .usage,
                    message: "the transfer date recorded for \(clientID) is "
                        + "\(UTCTime.format(milliseconds: recordedDate)), not \(UTCTime.format(milliseconds: date)): "
                        + "it is recorded once; if it was mistyped, run again with "
                        + "--correct and the right --transfer-date")
            }
            if let target, let recordedTarget = recorded.target, target != recordedTarget, !correcting {
                throw Stop(
                    status: .usage,
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
                status: .usage, message: "no transfer date is recorded for \(clientID): give --transfer-date YYYY-MM-DD"
            )
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
                status: .usage,
                message: "the transfer window of \(clientID) closed at \(UTCTime.format(milliseconds: closesAt)): "
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
                throw Stop(status: .usage, message: error.message)
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
        let refused = batch.counts["refused"] ?? 0
        let answered = refused + (batch.counts["exported"] ?? 0) + (batch.counts["exchanged"] ?? 0)
        guard refused > 0, refused == answered else { return }
        let why =
            direction == .import
            ? "if the transfer has not completed yet, Apple refuses every user: rerun once it has"
            : "check --target (the recipient's team ID) and --client-id"
        log("transfer_every_user_refused", level: "warning", [("refused", .integer(Int64(refused)))])
        output.error(
            "siwa-endpoint \(batch.name): Apple refused every user asked (\(refused)): \(why) (refused users are asked again)"
        )
    }

    private func process(_ entry: (line: Int, identifier: String), files: [AppendedLines], expiresAt: Int64) throws {
        var result: [(String, JSONValue)] = [
            ("line", .integer(Int64(entry.line))), (idName, .string(entry.identifier)),
        ]
        guard UserKeyPart.isValidSubject(entry.identifier), !entry.identifier.contains(" ") else {
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
            report(result + [("error", .string(code))], "refused")
        case .unknown(let reason):
            nameUnreachableSetting(reason)
            report(result + [("reason", .string(reason))], "unknown")
            if reason == "http_429" || reason == "token_http_429" {
                // A 429 each time, after each Retry-After: the next user would meet the same,
                // at a pace halved each time; the run stops rather than go on for days.
                log("transfer_throttled", level: "error", [("line", .integer(Int64(entry.line)))])
                throw Stop(
                    status: .failed,
                    message: "Apple answered 429 (too many requests) \(AppleSignedPost.throttledAttempts) times in a "
                        + "row at line \(entry.line), each after its Retry-After: the run stopped; rerun later "
                        + "(done users are skipped)")
            }
        case .configurationError(let code):
            log(
                "transfer_client_refused", level: "error",
                [("line", .integer(Int64(entry.line))), ("client_id", .string(clientID)), ("error", .string(code))])
            throw Stop(
                status: .usage,
                message: "Apple refused the client (\(code)) for client ID \(clientID) at line \(entry.line): "
                    + "check SIWA_APPLE_TEAM_ID, SIWA_APPLE_KEY_ID, SIWA_APPLE_PRIVATE_KEY_FILE and the client ID")
        case .tokenRefused:
            log("transfer_token_refused", level: "error", [("line", .integer(Int64(entry.line)))])
            throw Stop(
                status: .failed,
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
            report(result + [("sub", .string(subject)), ("written_again", .bool(true))], "skipped")
        case .configurationError(let code):
            throw Stop(
                status: .usage,
                message: "Apple refused the client (\(code)) for client ID \(clientID) at line \(entry.line): "
                    + "check SIWA_APPLE_TEAM_ID, SIWA_APPLE_KEY_ID, SIWA_APPLE_PRIVATE_KEY_FILE and the client ID")
        case .unknown(let reason):
            report(result + [("reason", .string("mapping_line_not_written_again_" + reason))], "unknown")
        default:
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
            ? ("SIWA_APPLE_TOKEN_URL", settings.tokenURL)
            : ("SIWA_APPLE_MIGRATION_URL", settings.migrationURL)
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
            throw Stop(status: .failed, message: "writing \(file.path) failed at line \(line); the run stopped")
        }
    }

    private func redisStop(_ error: RedisError, _ when: String) -> Stop {
        log(
            "redis_error", level: "error",
            [("error", .string(error.code.rawValue)), ("message", .string(error.operatorMessage))])
        return Stop(
            status: .unreachable,
            message: "Redis failed (\(error.code.rawValue)) \(when); the run stopped: run it again once Redis "
                + "answers (done users are skipped)")
    }

    /// The user's result line, with its outcome third; the outcome counted.
    private func report(_ fields: [(String, JSONValue)], _ outcome: String) {
        var fields = fields
        fields.insert(("outcome", .string(outcome)), at: 2)
        batch.report(fields)
        batch.count(outcome)
    }

    private func log(_ event: String, level: String = "info", _ fields: [(String, JSONValue)]) {
        batch.log(event, level: level, fields)
    }

    private func finish() {
        batch.finish(
            "transfer_finished", [("direction", .string(direction.rawValue))],
            after: [("access_tokens", .integer(Int64(migration.tokensObtained)))])
    }
}
