import Foundation
import SIWAJSON
import SIWARedis
import SIWATestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What an operator meets beyond the happy path of `transfer`, against the stand-in of Apple's
/// endpoints and a real redis-server: Apple's `Retry-After`, a mistyped target or date put
/// right, an import run before the transfer completed, an output directory someone else
/// made or planted links in, and standard output closed under the run.
@Suite("transfer: Retry-After, corrections, early import, the output directory, closed pipes", .serialized)
struct TransferCorrectionTests {
    static let client = TransferStack.clientID

    @Test(
        "a 429 (or a 503) with Retry-After: no request of any user before it has passed; the user asked again, exported"
    )
    func retryAfterHonoured() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        stack.exporting("000090.a", label: "a", transferSub: "tr.ra.0001", answer: "throttle_once")
        stack.exporting("000090.b", label: "b", transferSub: "tr.ra.0002")
        stack.exporting("000090.c", label: "c", transferSub: "tr.ra.0003", answer: "unavailable_once")
        try stack.start(retryAfterSeconds: 2)
        let run = try stack.run("export", ["000090.a", "000090.b", "000090.c"])
        #expect(run.status == 0, "\(run.errors)")
        #expect(stack.outcomes(run.output).map { $0["outcome"] ?? "" } == ["exported", "exported", "exported"])
        let asked = try stack.migrationLog().filter { $0["endpoint"] == "migration" }
        #expect(
            asked.map { "\($0["label"] ?? "-"):\($0["answer"] ?? "")" } == [
                "a:throttle", "a:ok", "b:ok", "c:unavailable", "c:ok",
            ])
        #expect(!asked.contains { $0["early"] == "true" }, "no request before Retry-After had passed")
        let times = asked.compactMap { $0["at"].flatMap(Double.init) }
        #expect(times.count == 5 && times[1] - times[0] >= 2.0 && times[4] - times[3] >= 2.0, "\(times)")
        let waits = ReconcileTests().logLines(run.errors).filter { $0["event"] == "apple_asked_to_wait" }
        #expect(waits.map { $0["wait_ms"] ?? "" } == ["2000", "2000"])
    }

    @Test(
        "Apple answering 429 to every request: the run stops after one user's 429s in a row, says so, and asks no other user"
    )
    func endlessThrottlingStopsTheRun() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        let users = ["000095.a", "000095.b", "000095.c"]
        for (index, user) in users.enumerated() {
            stack.exporting(user, label: "t\(index)", transferSub: "tr.th.000\(index)", answer: "throttle")
        }
        try stack.start(retryAfterSeconds: 1)
        let started = ContinuousClock.now
        let run = try stack.run("export", users)
        // Without the stop, each user meets its ten 429s and the pace halves at each: minutes.
        #expect(!run.timedOut && ContinuousClock.now - started < .seconds(45))
        #expect(run.status == 1, "\(run.errors)")
        #expect(stack.outcomes(run.output).map { $0["outcome"] ?? "" } == ["unknown"])
        #expect(stack.outcomes(run.output).first?["reason"] == "http_429")
        #expect(run.errors.contains("Apple answered 429 (too many requests) 10 times in a row at line 1"))
        #expect(run.errors.contains("rerun later"))
        let asked = try stack.migrationLog().filter { $0["endpoint"] == "migration" }
        #expect(Set(asked.compactMap { $0["label"] }) == ["t0"], "no other user is asked")
        let pending = try stack.members("siwa:transfer-pending:{\(Self.client)}:export")
        #expect(pending == Set(users), "asked again by a rerun")
    }

    @Test(
        "an import rerun whose mapping file lost its lines (emptied, or another --out): the lines written again, Redis untouched"
    )
    func importRerunWritesLostLinesAgain() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        stack.importing("tr.lost.0001", label: "a", sub: "000096.new", email: "a@privaterelay.appleid.com")
        stack.importing("tr.lost.0002", label: "b", sub: "000096.newb")
        try stack.start()
        let users = ["tr.lost.0001", "tr.lost.0002"]
        let first = try stack.run("import", users)
        #expect(first.status == 0, "\(first.errors)")
        let written = stack.file("import-mapping.jsonl")
        #expect(written?.contains("a@privaterelay.appleid.com") == true)
        let record = try stack.hash("siwa:transfer-id:{\(Self.client):tr.lost.0001}")

        // Emptied by someone else between runs: every user skipped, its line written again.
        #expect(truncate(stack.outDirectory + "/import-mapping.jsonl", 0) == 0)
        let again = try stack.run("import", users)
        #expect(again.status == 0, "\(again.errors)")
        #expect(stack.outcomes(again.output).map { $0["outcome"] ?? "" } == ["skipped", "skipped"])
        #expect(stack.outcomes(again.output).map { $0["written_again"] ?? "" } == ["true", "true"])
        #expect(stack.file("import-mapping.jsonl") == written)
        #expect(try stack.hash("siwa:transfer-id:{\(Self.client):tr.lost.0001}") == record, "Redis untouched")

        // Another directory: the same lines; a third run there writes none twice and asks nothing.
        let elsewhere = stack.base.directory.appendingPathComponent("import-again").path
        #expect(try stack.run("import", users, out: elsewhere).status == 0)
        #expect(try String(contentsOfFile: elsewhere + "/import-mapping.jsonl", encoding: .utf8) == written)
        let asked = try stack.migrationLog().count
        let third = try stack.run("import", users, out: elsewhere)
        #expect(stack.outcomes(third.output).allSatisfy { $0["written_again"] == nil })
        #expect(try stack.migrationLog().count == asked)
        #expect(try String(contentsOfFile: elsewhere + "/import-mapping.jsonl", encoding: .utf8) == written)
    }

    @Test(
        "a mistyped --target or --transfer-date: refused without --correct; with it, every user exported again for the right team, the hand-off anew"
    )
    func correctingTargetAndDate() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        stack.exporting("000091.a", label: "a", transferSub: "tr.ct.0001")
        stack.exporting("000091.b", label: "b", transferSub: "tr.ct.0002")
        try stack.start()
        let users = ["000091.a", "000091.b"]
        let wrong = try stack.run("export", users, target: TransferStack.otherTeam)
        #expect(wrong.status == 0, "\(wrong.errors)")
        #expect(stack.file("transfer-ids.txt") == "tr.ct.0001-otherteam1\ntr.ct.0002-otherteam1\n")
        let askedBefore = try stack.migrationLog().count

        // The right team without --correct: refused before Apple is asked, nothing changed.
        let refused = try stack.run("export", users)
        #expect(refused.status == 2)
        #expect(refused.errors.contains("were exported for team \(TransferStack.otherTeam), not RECIPIENT1"))
        #expect(refused.errors.contains("--correct"))
        #expect(refused.output.isEmpty)
        #expect(try stack.migrationLog().count == askedBefore)
        #expect(stack.file("transfer-ids.txt") == "tr.ct.0001-otherteam1\ntr.ct.0002-otherteam1\n")

        // --correct: every user exported again for the right team; the files hold its ids only.
        let corrected = try stack.run("export", users, extra: ["--correct"])
        #expect(corrected.status == 0, "\(corrected.errors)")
        #expect(stack.outcomes(corrected.output).map { $0["outcome"] ?? "" } == ["exported", "exported"])
        #expect(stack.file("transfer-ids.txt") == "tr.ct.0001\ntr.ct.0002\n")
        #expect(
            stack.file("export-mapping.jsonl")
                == """
                {"sub":"000091.a","transfer_sub":"tr.ct.0001"}
                {"sub":"000091.b","transfer_sub":"tr.ct.0002"}

                """)
        let record = try stack.hash("siwa:transfer-from:{\(Self.client):000091.a}")
        #expect(record["transfer_sub"] == "tr.ct.0001" && record["target"] == TransferStack.recipientTeam)
        let window = try stack.hash("siwa:transfer:{\(Self.client)}")
        #expect(window["target"] == TransferStack.recipientTeam && window["corrected_at"] != nil)
        let correction = ReconcileTests().logLines(corrected.errors).first { $0["event"] == "transfer_corrected" }
        #expect(correction?["target_was"] == TransferStack.otherTeam)

        // A rerun into another directory: every user skipped, the hand-off written again from Redis.
        let elsewhere = stack.base.directory.appendingPathComponent("out-again").path
        let again = try stack.run("export", users, out: elsewhere)
        #expect(again.status == 0, "\(again.errors)")
        #expect(stack.outcomes(again.output).map { $0["outcome"] ?? "" } == ["skipped", "skipped"])
        #expect(
            try String(contentsOfFile: elsewhere + "/transfer-ids.txt", encoding: .utf8) == "tr.ct.0001\ntr.ct.0002\n")

        // A mistyped date: refused without --correct, replaced with it (the window moves too).
        let otherDate = TransferStack.date(daysAgo: 2)
        let dateRefused = try stack.run("export", users, date: otherDate)
        #expect(dateRefused.status == 2)
        #expect(dateRefused.errors.contains("it is recorded once; if it was mistyped, run again with --correct"))
        let dateCorrected = try stack.run("export", users, date: otherDate, extra: ["--correct"])
        #expect(dateCorrected.status == 0, "\(dateCorrected.errors)")
        let milliseconds = TransferTests.dateMilliseconds(otherDate)
        let moved = try stack.hash("siwa:transfer:{\(Self.client)}")
        #expect(moved["transfer_date"] == String(milliseconds))
        #expect(moved["closes_at"] == String(milliseconds + 60 * 86_400_000))
        let expiry = try stack.base.redisConnection().command("PEXPIRETIME", "siwa:transfer:{\(Self.client)}").integer
        #expect(expiry == milliseconds + 365 * 86_400_000)

        // An import (no target) with --correct and no date: nothing to correct with.
        let nothingGiven = try stack.run("import", ["tr.ct.0001"], date: nil, extra: ["--correct"])
        #expect(nothingGiven.status == 2)
        #expect(nothingGiven.errors.contains("--correct replaces the recorded --transfer-date or --target"))
    }

    @Test(
        "an import before the transfer completed: every user refused, said plainly; once it has, the rerun exchanges them all"
    )
    func importBeforeTheTransferCompleted() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        stack.importing("tr.ey.0001", label: "e1", sub: "000092.new.1")
        stack.importing("tr.ey.0002", label: "e2", sub: "000092.new.2")
        try stack.start(transferCompletes: false)
        let identifiers = ["tr.ey.0001", "tr.ey.0002"]

        // A transfer date after today cannot be a completed transfer: refused before Redis.
        let future = try stack.run("import", identifiers, date: TransferStack.date(daysAgo: -2))
        #expect(future.status == 2)
        #expect(future.errors.contains("is after today: import only once the transfer has completed"))
        #expect(try stack.hash("siwa:transfer:{\(Self.client)}").isEmpty)

        let early = try stack.run("import", identifiers)
        #expect(early.status == 1)
        #expect(stack.outcomes(early.output).map { $0["outcome"] ?? "" } == ["refused", "refused"])
        #expect(early.errors.contains("Apple refused every user asked (2): if the transfer has not completed yet"))
        #expect(try stack.hash("siwa:transfer-id:{\(Self.client):tr.ey.0001}")["import_error"] == "invalid_request")

        _ = FileManager.default.createFile(atPath: stack.transferCompletedFile, contents: nil)
        let after = try stack.run("import", identifiers, date: nil)
        #expect(after.status == 0, "\(after.errors)")
        #expect(stack.outcomes(after.output).map { $0["outcome"] ?? "" } == ["exchanged", "exchanged"])
        #expect(!after.errors.contains("refused every user"))
        let record = try stack.hash("siwa:transfer-id:{\(Self.client):tr.ey.0001}")
        #expect(record["sub"] == "000092.new.1" && record["import_error"] == nil && record["import_refused_at"] == nil)
        // The mapping keeps the refusal, then the answer that supersedes it.
        #expect(
            stack.file("import-mapping.jsonl")
                == """
                {"transfer_sub":"tr.ey.0001","error":"invalid_request"}
                {"transfer_sub":"tr.ey.0002","error":"invalid_request"}
                {"transfer_sub":"tr.ey.0001","sub":"000092.new.1"}
                {"transfer_sub":"tr.ey.0002","sub":"000092.new.2"}

                """)
        #expect(
            try stack.migrationLog().filter { $0["endpoint"] == "migration" }.map { $0["answer"] ?? "" } == [
                "not_yet", "not_yet", "ok", "ok",
            ])
    }

    /// A root-only file a planter wants the run to write into or widen.
    static func victim(in directory: URL) throws -> String {
        let path = directory.appendingPathComponent("victim-\(UUID().uuidString)").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data("root only\n".utf8)))
        #expect(chmod(path, 0o600) == 0)
        return path
    }

    static func unchanged(_ victim: String) throws -> Bool {
        let attributes = try FileManager.default.attributesOfItem(atPath: victim)
        return try String(contentsOfFile: victim, encoding: .utf8) == "root only\n"
            && (attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600
    }

    @Test(
        "--out: a directory of another user, one others can write, a planted link or hard link, one that cannot be made: exit 2 before Redis, nothing written"
    )
    func outputDirectoryPlants() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        stack.exporting("000093.a", label: "a", transferSub: "tr.od.0001")
        try stack.start()
        let base = stack.base.directory
        let victim = try Self.victim(in: base)
        var cases: [(name: String, expected: String)] = []

        if geteuid() == 0 {
            // Made by nobody, holding nobody's link to a root-only file.
            let planted = base.appendingPathComponent("nobodys").path
            #expect(mkdir(planted, 0o755) == 0)
            #expect(symlink(victim, planted + "/export-mapping.jsonl") == 0)
            #expect(lchown(planted + "/export-mapping.jsonl", 65534, 65534) == 0)
            #expect(chown(planted, 65534, 65534) == 0)
            cases.append((planted, "belongs to uid 65534 with mode 755"))
        }
        let open = base.appendingPathComponent("writable").path
        #expect(mkdir(open, 0o700) == 0 && chmod(open, 0o777) == 0)
        cases.append((open, "with mode 777: --out must be a directory of the user running the command"))
        let linked = base.appendingPathComponent("linked").path
        #expect(mkdir(linked, 0o700) == 0)
        #expect(symlink(victim, linked + "/export-mapping.jsonl") == 0)
        cases.append((linked, "cannot open \(linked)/export-mapping.jsonl: it is a symbolic link"))
        let hardLinked = base.appendingPathComponent("hard-linked").path
        #expect(mkdir(hardLinked, 0o700) == 0)
        #expect(link(victim, hardLinked + "/transfer-ids.txt") == 0)
        cases.append(
            (hardLinked, "transfer-ids.txt is not a regular file of the user running the command with one link"))
        // A link where --out names the directory (planted in /tmp, say), to a directory of
        // the user: refused, with or without a trailing slash, and nothing is made there.
        let pointedAt = base.appendingPathComponent("pointed-at").path
        #expect(mkdir(pointedAt, 0o700) == 0)
        let symlinked = base.appendingPathComponent("symlinked").path
        #expect(symlink(pointedAt, symlinked) == 0)
        cases.append((symlinked, "cannot open \(symlinked): it is a symbolic link"))
        cases.append((symlinked + "/", "cannot open \(symlinked)/: it is a symbolic link"))
        let underAFile = victim + "/out"
        cases.append((underAFile, "cannot create \(underAFile): Not a directory"))

        for (directory, expected) in cases {
            let run = try stack.run("export", ["000093.a"], out: directory)
            #expect(run.status == 2, "\(directory)")
            #expect(run.errors.contains(expected), "\(run.errors)")
            #expect(run.output.isEmpty)
        }
        #expect(try Self.unchanged(victim), "the root-only file neither written nor widened")
        #expect(try FileManager.default.contentsOfDirectory(atPath: pointedAt).isEmpty)
        #expect(try stack.hash("siwa:transfer:{\(Self.client)}").isEmpty, "no date recorded")
        #expect(try stack.migrationLog().isEmpty, "Apple never asked")

        // The directory made for the run: 0700, the run's own.
        let made = base.appendingPathComponent("made").path
        #expect(try stack.run("export", ["000093.a"], out: made).status == 0)
        let attributes = try FileManager.default.attributesOfItem(atPath: made)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o700)
    }

    @Test(
        "Apple not reached: the setting that names the URL in one line; a token URL moved without the migration URL warned at start"
    )
    func namesTheSettingToCheck() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        try stack.start()
        let closed = "https://localhost:\(try LoopbackPort.free())/auth/usermigrationinfo"
        let unreached = try stack.run(
            "export", ["000095.a", "000095.b"], overriding: ["SIWA_APPLE_MIGRATION_URL": closed])
        #expect(unreached.status == 1)
        #expect(stack.outcomes(unreached.output).map { $0["reason"] ?? "" } == ["connect_failed", "connect_failed"])
        let named = ReconcileTests().logLines(unreached.errors).filter { $0["event"] == "apple_unreachable" }
        #expect(named.map { $0["setting"] ?? "" } == ["SIWA_APPLE_MIGRATION_URL"], "once per run")
        #expect(named.first?["url"] == closed)

        // Only the migration URL moved (the token URL left at Apple's): said before anything
        // is asked; Redis unreachable here stops the run before any request leaves.
        var environment = stack.environment(.sender)
        environment["SIWA_APPLE_TOKEN_URL"] = nil
        environment["SIWA_REDIS_URL"] = "redis://127.0.0.1:\(try LoopbackPort.free())"
        environment["SIWA_REDIS_TIMEOUT_MS"] = "300"
        let mixed = try CommandRun.endpoint(try stack.arguments("export", ["000095.a"]), environment: environment)
        #expect(mixed.status == 3)
        #expect(ReconcileTests().logLines(mixed.errors).contains { $0["event"] == "apple_urls_differ" })
    }

    @Test("standard output closed under a run: exit 141 after the first user's records, quietly; the rerun goes on")
    func closedPipeMidRun() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        for index in 1...3 { stack.exporting("000094.\(index)", label: "p\(index)", transferSub: "tr.cp.000\(index)") }
        try stack.start()
        let users = (1...3).map { "000094.\($0)" }
        let run = try CommandRun.runIntoClosedPipe(
            ServeProcess.binaryURL, try stack.arguments("export", users), environment: stack.environment(.sender))
        #expect(run.status == 141, "\(run.errors)")
        #expect(!run.errors.contains("Fatal error") && !run.errors.contains("siwa-endpoint transfer"), "\(run.errors)")
        // The first user is whole (its lines and its record came before its report); the others pending.
        #expect(try stack.hash("siwa:transfer-from:{\(Self.client):000094.1}")["transfer_sub"] == "tr.cp.0001")
        #expect(try stack.members("siwa:transfer-pending:{\(Self.client)}:export") == ["000094.2", "000094.3"])
        #expect(stack.file("transfer-ids.txt") == "tr.cp.0001\n")
        let rerun = try stack.run("export", users, date: nil)
        #expect(rerun.status == 0, "\(rerun.errors)")
        #expect(stack.outcomes(rerun.output).map { $0["outcome"] ?? "" } == ["skipped", "exported", "exported"])
    }
}
