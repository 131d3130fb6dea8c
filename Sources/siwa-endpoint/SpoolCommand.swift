import Foundation
import SIWAJSON
import SIWASettings
import SIWASpool
import SIWASupport
import SIWATelemetry
import SIWAVerification

/// `spool status`, `list`, `show`, `requeue` and `discard`: look into a spool directory,
/// and put set-aside records back in line (all, or one) or discard one, with or without a
/// running `serve`.
enum SpoolCommand {
    static let help = """
        usage: siwa-endpoint spool status  [--spool-dir DIR | --env-file FILE]
               siwa-endpoint spool list    [--spool-dir DIR | --env-file FILE]
               siwa-endpoint spool show ID [--spool-dir DIR | --env-file FILE] [--show-address]
               siwa-endpoint spool requeue [ID] [--spool-dir DIR | --env-file FILE]
               siwa-endpoint spool discard ID --reason TEXT [--spool-dir DIR | --env-file FILE]

        The spool directory is --spool-dir, else serve's SIWA_SPOOL_DIR (from the
        environment and --env-file, the environment wins), else
        /var/lib/siwa-endpoint/spool. Each prints JSON (one object; list one a line):
        --json is accepted, as by every command that reports, and changes nothing.

        status   records waiting (depth), the age of the oldest one in seconds,
                 records set aside in rejected/ (Redis refused them for a reason about
                 the record), and the torn files (damaged bytes) and their size.
        requeue  puts every set-aside record back in line, behind the records waiting
                 now, once the cause is fixed. A running serve applies them within a
                 second; a stopped one at its next start. Safe to run at any time: each
                 file moves by one atomic rename, so no record is applied twice.
                 With ID: that record only.
        list     one JSON line per set-aside or torn record: its id, why it was set
                 aside (the refusal's code; damaged_bytes for torn bytes), type, client
                 ID and age. Never an address, never a sub.
        show     the record (or the torn bytes), its email address masked unless
                 --show-address.
        discard  deletes one set-aside or torn record for good: the loss of a
                 notification that was answered 200, so --reason is required; logged as
                 one JSON line spool_record_discarded with the reason and your user name,
                 on standard error and appended to the spool's audit.jsonl.

        Exit status: 0 done; 1 no such record (or already requeued or discarded), torn
        bytes asked to be requeued, or the spool could not be read; 2 a usage or
        settings mistake.
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--spool-dir", "--reason", "--env-file"],
            flagOptions: ["--show-address", CommandLineArguments.json])
        guard let action = arguments.positionals.first, arguments.positionals.count <= 2 else {
            throw UsageError("spool takes one action: status, list, show, requeue or discard\n\n\(help)")
        }
        let id = arguments.positionals.count == 2 ? arguments.positionals[1] : nil
        let takesID: Set<String> = ["show", "discard"]
        if takesID.contains(action) && id == nil { throw UsageError("spool \(action) takes the record's ID") }
        if id != nil && !takesID.union(["requeue"]).contains(action) {
            throw UsageError("spool \(action) takes no ID")
        }
        let directory: String
        if let given = arguments.value("--spool-dir") {
            directory = given
        } else {
            // Serve's setting, read and checked as serve reads it.
            guard let settings = OperatorSettings.load(CommandSettings.self, envFile: arguments.value("--env-file"))
            else { return .usage }
            do throws(ConfigurationError) {
                directory = try settings[.spoolDirectory]
            } catch {
                return ServeCommand.refuse(error).exitStatus
            }
        }
        do {
            switch action {
            case "status":
                let status = try SpoolInspector.status(spoolDirectory: directory)
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                let age: JSONValue = status.oldestSpooledAt.map { .integer(max(0, now - $0) / 1000) } ?? .null
                Output.json(
                    [
                        ("spool_dir", .string(directory)), ("depth", .integer(Int64(status.depth))),
                        ("oldest_age_seconds", age), ("rejected", .integer(Int64(status.setAside))),
                        // The former name of `rejected`, for one release.
                        ("set_aside", .integer(Int64(status.setAside))),
                        ("torn_files", .integer(Int64(status.tornFiles))),
                        ("torn_bytes", .integer(Int64(status.tornBytes))),
                    ])
            case "requeue" where id != nil:
                return report(try SpoolInspector.requeue(spoolDirectory: directory, id: id ?? ""), action, directory)
            case "list":
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                for record in try SpoolInspector.records(spoolDirectory: directory) {
                    let first = record.firstTypeAndClient
                    Output.json(
                        [
                            ("id", .string(record.id)), ("kind", .string(record.kind.rawValue)),
                            ("why", .string(record.why)), ("provider", record.provider.map { .string($0) } ?? .null),
                            ("type", first.map { .string($0.type) } ?? .null),
                            ("client_id", first.map { .string($0.clientID) } ?? .null),
                            ("age_seconds", .integer(max(0, now - record.setAsideAt) / 1000)),
                            ("records", .integer(Int64(record.recordCount))),
                        ])
                }
            case "show":
                guard let record = try SpoolInspector.record(spoolDirectory: directory, id: id ?? "") else {
                    return notFound(action, id ?? "")
                }
                Output.line(try describe(record, showAddress: arguments.has("--show-address")))
            case "discard":
                return try discard(id ?? "", reason: arguments.value("--reason"), directory: directory)
            case "requeue":
                let requeued = try SpoolInspector.requeue(spoolDirectory: directory)
                Output.json(
                    [
                        ("spool_dir", .string(directory)), ("requeued", .integer(Int64(requeued.records))),
                        ("files", .integer(Int64(requeued.files))),
                    ])
            default:
                throw UsageError("unknown action \(action): status, list, show, requeue or discard")
            }
        } catch let error as SpoolError {
            Output.error("siwa-endpoint spool \(action): \(error.description)")
            return .failed
        }
        return .success
    }

    static func discard(_ id: String, reason: String?, directory: String) throws -> ExitStatus {
        let reason = (reason ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !reason.isEmpty else {
            throw UsageError("spool discard needs --reason TEXT: it loses a notification that was answered 200")
        }
        guard reason.count <= 500 else { throw UsageError("--reason is at most 500 characters") }
        // No discard that the audit file could not record (a link or a FIFO in its place).
        try SpoolInspector.checkAuditable(spoolDirectory: directory)
        let outcome = try SpoolInspector.discard(spoolDirectory: directory, id: id)
        if case .done(let record) = outcome {
            let first = record.firstTypeAndClient
            let line = EventLog.eventLine(
                "spool_record_discarded", level: "warning",
                [
                    ("id", .string(record.id)), ("kind", .string(record.kind.rawValue)), ("why", .string(record.why)),
                    ("provider", record.provider.map { .string($0) } ?? .null),
                    ("type", first.map { .string($0.type) } ?? .null),
                    ("client_id", first.map { .string($0.clientID) } ?? .null),
                    ("records", .integer(Int64(record.recordCount))), ("reason", .string(reason)),
                    ("user", .string(operatorName())), ("uid", .integer(Int64(getuid()))),
                    ("sudo_user", ProcessInfo.processInfo.environment["SUDO_USER"].map { .string($0) } ?? .null),
                ])
            // The same line on standard error (the journal, under systemd) and in the
            // spool's audit file, which stays with the spool whoever ran the command.
            EventLog.emit(line)
            do {
                try SpoolInspector.audit(spoolDirectory: directory, line: line)
            } catch {
                Output.error(
                    "siwa-endpoint spool discard: the record is discarded, but the audit file could not be written: "
                        + error.description)
                _ = report(outcome, "discard", directory)
                return .failed
            }
        }
        return report(outcome, "discard", directory)
    }

    /// One JSON object for a done action; a message and exit 1 otherwise.
    static func report(_ outcome: SpoolInspector.OneRecordOutcome, _ action: String, _ directory: String) -> ExitStatus
    {
        switch outcome {
        case .done(let record):
            Output.json(
                [
                    ("spool_dir", .string(directory)), ("id", .string(record.id)),
                    (action == "discard" ? "discarded" : "requeued", .integer(Int64(record.recordCount))),
                ])
            return .success
        case .notFound:
            return notFound(action, "")
        case .notARecord:
            Output.error(
                "siwa-endpoint spool \(action): torn bytes are not a record and cannot be requeued; "
                    + "read them with spool show, then spool discard them")
            return .failed
        }
    }

    static func notFound(_ action: String, _ id: String) -> ExitStatus {
        Output.error(
            "siwa-endpoint spool \(action): no set-aside or torn record with that ID (already requeued or discarded?); "
                + "spool list shows them")
        return .failed
    }

    /// The record as one JSON object; the address masked unless `showAddress`.
    static func describe(_ record: SpoolInspector.Record, showAddress: Bool) throws -> String {
        var members: [(String, JSONValue)] = [
            ("id", .string(record.id)), ("kind", .string(record.kind.rawValue)), ("why", .string(record.why)),
            ("file", .string(record.path)), ("set_aside_at", .integer(record.setAsideAt)),
            ("provider", record.provider.map { .string($0) } ?? .null),
        ]
        if record.kind == .torn {
            members.append(("bytes", .integer(Int64(record.bytes))))
            members.append(("text", .string(try SpoolInspector.tornText(record, showAddress: showAddress))))
            return JSONWriter.object(members)
        }
        let notifications: [JSONValue] = record.notifications.map { notification in
            var fields: [String: JSONValue] = [
                "client_id": .string(notification.clientID), "sub": .string(notification.subject),
                "type": .string(notification.type.name), "raw_type": .string(notification.rawType),
                "event_time": .integer(notification.eventTimeMilliseconds), "jti": .string(notification.tokenID),
                "iat": .integer(notification.issuedAt),
                "exp": notification.expiresAt.map(JSONValue.integer) ?? .null,
            ]
            if let email = notification.email {
                fields["email"] = .string(showAddress ? email : "(masked: --show-address shows it)")
            }
            if let isPrivate = notification.isPrivateEmail { fields["is_private_email"] = .bool(isPrivate) }
            return .object(fields)
        }
        members.append(("notifications", .array(notifications)))
        if !record.securityEvents.isEmpty {
            // Google's tokens hold no email address: nothing to mask.
            members.append(("security_events", .array(record.securityEvents.map(describe))))
        }
        return JSONWriter.object(members)
    }

    /// One of Google's set-aside tokens, each event with what it says about whom.
    static func describe(_ securityEvent: VerifiedSecurityEvent) -> JSONValue {
        let events: [JSONValue] = securityEvent.events.map { event in
            var fields: [String: JSONValue] = [
                "type": .string(event.type.name), "raw_type": .string(event.rawType),
                "sub": event.subject.map { .string($0) } ?? .null,
            ]
            if let reason = event.reason { fields["reason"] = .string(reason) }
            if let state = event.state { fields["state"] = .string(state) }
            if let token = event.revokedToken {
                fields["token_type"] = .string(token.tokenType)
                fields["token_identifier_alg"] = .string(token.identifierAlgorithm)
            }
            return .object(fields)
        }
        return .object([
            "client_ids": .array(securityEvent.clientIDs.map { .string($0) }), "jti": .string(securityEvent.tokenID),
            "iat": .integer(securityEvent.issuedAt), "events": .array(events),
        ])
    }

    /// The effective user's name (the operator; under sudo, SUDO_USER says who called it).
    static func operatorName() -> String {
        guard let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name else { return String(geteuid()) }
        return String(cString: name)
    }
}
