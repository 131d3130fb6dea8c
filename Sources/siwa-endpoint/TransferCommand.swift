import Foundation
import SIWAHTTPS
import SIWAJSON
import SIWARedis
import SIWAServer
import SIWAVerification

#if canImport(Glibc)
    import Glibc
#endif

/// `transfer export` and `transfer import`: Apple's user migration for an app moved to
/// another team (TN3159). See docs/transfer.md.
enum TransferCommand {
    static let help = """
        usage: siwa-endpoint transfer export --target TEAM_ID --client-id CLIENT_ID --out DIR
                                             [--transfer-date YYYY-MM-DD] [--rate N] [--env-file FILE] FILE
               siwa-endpoint transfer import --client-id CLIENT_ID --out DIR
                                             [--transfer-date YYYY-MM-DD] [--rate N] [--env-file FILE] FILE

        export (the sending team, with its key): FILE (or - for standard input) holds the
          users' sub, one a line. Each is exchanged at Apple for the transfer identifier of
          the recipient team TEAM_ID. Writes DIR/transfer-ids.txt (transfer identifiers
          only: the file to hand to the recipient) and DIR/export-mapping.jsonl (mode 0600:
          {"sub","transfer_sub"} or {"sub","error"}: keep it, never hand it over).
        import (the recipient team, with its key): FILE holds transfer identifiers, one a
          line. Each is exchanged for the new sub (and the new email where there is one).
          Writes DIR/import-mapping.jsonl (mode 0600: {"transfer_sub","sub","email",
          "is_private_email"} or {"transfer_sub","error"}) for the team's database, and
          records transfer_sub -> sub in Redis; where the export ran against the same
          Redis (one organisation), also links the old sub to the new one.

        One JSON line per user on standard output: {"line","outcome",...} with outcome
        exported, exchanged, refused (Apple's "error", such as invalid_request: a user who
        cannot be migrated), unknown (a "reason", after the retries), skipped (done by an
        earlier run) or malformed. An import line says what Redis already held under the
        new sub ("held": consent revoked, account deleted, forwarding).

        --transfer-date  the day the transfer completed (UTC): required on the first run of
                         the app, recorded once; Apple's 60-day window counts from it
        --rate N         at most N requests per second (default 5; from 0.01 to 100); a
                         429 halves it for the rest of the run

        Exit status: 0 every user exchanged (or done before); 1 some user refused, unknown
        or malformed, or a renewed access token refused; 2 a configuration or usage error
        (invalid_client included); 3 Redis did not answer (rerun: done users are skipped).

        settings: those of reconcile (see `siwa-endpoint reconcile --help`), and
          SIWA_APPLE_MIGRATION_URL (default: \(AppleUserMigration.defaultMigrationURL))
        """

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(
            words,
            valueOptions: ["--env-file", "--rate", "--target", "--client-id", "--out", "--transfer-date"])
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
        return run.run(entries, date: date, outDirectory: outDirectory)
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

/// One line file the run appends whole lines to, each written with one `write` and synced
/// before Redis records the user, so a killed run leaves whole lines only.
private final class AppendedLines {
    let path: String
    private let descriptor: Int32
    /// The lines the file held when opened (an earlier run's), so a rerun adds none twice.
    private(set) var lines: Set<String>

    init?(path: String, mode: mode_t) {
        self.path = path
        let existing = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        lines = Set(existing.split(separator: "\n").map(String.init))
        descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, mode)
        guard descriptor >= 0, fchmod(descriptor, mode) == 0 else { return nil }
        // A line cut short by a kill: ended, so the next line stands on its own.
        if !existing.isEmpty, !existing.hasSuffix("\n"), !write("") { return nil }
    }

    deinit { close(descriptor) }

    /// Appends `line` unless the file holds it; false when the write or the sync failed.
    func append(_ line: String) -> Bool {
        guard !lines.contains(line) else { return true }
        guard write(line) else { return false }
        lines.insert(line)
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
    let pacer: Pacer
    let progress = isatty(2) == 1
    var counts: [String: Int] = [:]
    let started = ContinuousClock.now
    var toDo = 0
    var handled = 0

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
        let pacer = Pacer(interval: .seconds(1 / rate))
        self.pacer = pacer
        migration = AppleUserMigration(
            migrationURL: configuration.migrationURL, clientID: clientID,
            client: ReconcileCommand.appleClient(configuration, pacer: pacer),
            slowDown: { pacer.slowDown() })
    }

    var name: String { "transfer \(direction.rawValue)" }

    func run(_ entries: [(line: Int, identifier: String)], date: Int64?, outDirectory: String) -> Int32 {
        do {
            let (transferDate, expiresAt) = try window(date)
            let done = try markPending(entries, expiresAt: expiresAt)
            let files = try openFiles(outDirectory)
            toDo = entries.count - done.count
            EventLog.event(
                "transfer_started",
                [
                    ("direction", .string(direction.rawValue)), ("client_id", .string(clientID)),
                    ("team_id", .string(configuration.teamID)), ("users", .integer(Int64(entries.count))),
                    ("already_done", .integer(Int64(done.count))), ("transfer_date", .integer(transferDate)),
                    ("closes_at", .integer(transferDate + TransferStore.window.wholeMilliseconds)),
                ] + (target.map { [("target", JSONValue.string($0))] } ?? []))
            for entry in entries {
                if done.contains(entry.identifier) {
                    counts["skipped", default: 0] += 1
                    report([("line", .integer(Int64(entry.line))), (idName, .string(entry.identifier))], "skipped")
                    continue
                }
                try process(entry, files: files, expiresAt: expiresAt)
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
        let unfinished = (counts["refused"] ?? 0) + (counts["unknown"] ?? 0) + (counts["malformed"] ?? 0)
        return unfinished > 0 ? 1 : 0
    }

    /// The identifier's name in the output: the input's kind of identifier.
    var idName: String { direction == .export ? "sub" : "transfer_sub" }

    /// The recorded transfer date (recording `date` on the first run) and the records' expiry.
    private func window(_ date: Int64?) throws -> (Int64, Int64) {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        // A date whose window has closed is refused before it could be recorded.
        if let date, now >= date + TransferStore.window.wholeMilliseconds {
            throw Stop(
                status: 2,
                message: "the transfer window of a transfer on \(UserCommand.utcDate(date)) closed at "
                    + "\(UserCommand.utcDate(date + TransferStore.window.wholeMilliseconds)): Apple no longer "
                    + "exchanges its identifiers")
        }
        let recorded: Int64?
        do {
            recorded = try store.transferDate(recording: date)
        } catch {
            throw redisStop(error, "before anything was written")
        }
        guard let recorded else {
            throw Stop(
                status: 2, message: "no transfer date is recorded for \(clientID): give --transfer-date YYYY-MM-DD")
        }
        if let date, date != recorded {
            throw Stop(
                status: 2,
                message: "the transfer date recorded for \(clientID) is \(UserCommand.utcDate(recorded)), "
                    + "not \(UserCommand.utcDate(date)): it is recorded once")
        }
        let closesAt = recorded + TransferStore.window.wholeMilliseconds
        if now >= closesAt {
            throw Stop(
                status: 2,
                message: "the transfer window of \(clientID) closed at \(UserCommand.utcDate(closesAt)): "
                    + "Apple no longer exchanges its identifiers")
        }
        return (recorded, recorded + TransferStore.recordLifetime.wholeMilliseconds)
    }

    /// Adds every identifier not done yet to the pending set; returns those done.
    private func markPending(_ entries: [(line: Int, identifier: String)], expiresAt: Int64) throws -> Set<String> {
        var done: Set<String> = []
        for entry in entries where UserKeyPart.isValidSubject(entry.identifier) {
            do {
                if try store.markPending(entry.identifier, direction: direction, expiresAt: expiresAt) {
                    done.insert(entry.identifier)
                }
            } catch {
                throw redisStop(error, "before any user was sent to Apple")
            }
        }
        return done
    }

    private func openFiles(_ directory: String) throws -> [AppendedLines] {
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) {
            guard mkdir(directory, 0o700) == 0 else {
                throw Stop(status: 2, message: "cannot create \(directory)")
            }
        } else if !isDirectory.boolValue {
            throw Stop(status: 2, message: "\(directory) is not a directory")
        }
        let names: [(String, mode_t)] =
            direction == .export
            ? [("transfer-ids.txt", 0o644), ("export-mapping.jsonl", 0o600)] : [("import-mapping.jsonl", 0o600)]
        return try names.map { name, mode in
            let path = (directory as NSString).appendingPathComponent(name)
            guard let file = AppendedLines(path: path, mode: mode) else {
                throw Stop(status: 2, message: "cannot write \(path)")
            }
            return file
        }
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
                    files,
                    [
                        transferSubject,
                        JSONWriter.object([
                            ("sub", .string(entry.identifier)), ("transfer_sub", .string(transferSubject)),
                        ]),
                    ], line: entry.line)
                do {
                    try store.recordExport(
                        subject: entry.identifier, transferSubject: transferSubject, error: nil, at: now,
                        expiresAt: expiresAt)
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
                        subject: entry.identifier, transferSubject: nil, error: code, at: now, expiresAt: expiresAt)
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
            counts["unknown", default: 0] += 1
            report(result + [("reason", .string(reason))], "unknown")
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
        if progress { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        var fields = fields
        fields.insert(("outcome", .string(outcome)), at: 2)
        Output.line(JSONWriter.object(fields))
    }

    private func log(_ event: String, level: String = "info", _ fields: [(String, JSONValue)]) {
        if progress { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        EventLog.event(event, level: level, fields)
    }

    private func showProgress() {
        guard progress, toDo > 0 else { return }
        let elapsed = Double((ContinuousClock.now - started).components.seconds)
        let left = Int(elapsed / Double(max(1, handled)) * Double(toDo - handled))
        let estimate = left >= 3600 ? "\(left / 3600)h\(left % 3600 / 60)m" : "\(left / 60)m\(left % 60)s"
        FileHandle.standardError.write(
            Data("\r\u{1B}[K\(name): \(handled)/\(toDo), about \(estimate) left".utf8))
    }

    private func finish() {
        if progress { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        let unfinished = (counts["refused"] ?? 0) + (counts["unknown"] ?? 0) + (counts["malformed"] ?? 0)
        EventLog.event(
            "transfer_finished", level: unfinished > 0 ? "warning" : "info",
            [("direction", .string(direction.rawValue))]
                + Self.outcomes.map { ($0, .integer(Int64(counts[$0] ?? 0))) }
                + [("access_tokens", .integer(Int64(migration.tokensObtained)))])
    }
}
