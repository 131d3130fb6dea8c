import Foundation
import SIWAJSON
import SIWAVerification
import Testing

/// `spool list`, `show`, `requeue ID` and `discard ID`: one set-aside or torn record at a
/// time, on a real spool on disk, with the real binary, with serve running and stopped.
@Suite("spool: one set-aside record at a time", .serialized)
struct SpoolOneRecordTests {
    func spool(_ stack: ServeStack, _ words: [String]) throws -> CommandRun {
        try CommandRun.endpoint(["spool"] + words + ["--spool-dir", stack.spoolDirectory], environment: [:])
    }

    func listed(_ stack: ServeStack) throws -> [[String: String]] {
        let run = try spool(stack, ["list"])
        #expect(run.status == 0, "\(run.errors)")
        return ReconcileTests().logLines(run.output)
    }

    @Test("with serve running: list (no address, no sub), show (masked unless asked), requeue one, discard one")
    func oneAtATimeWhileServing() throws {
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        let admin = stack.redisConnection()
        let subs = ["000060.s.0001", "000060.s.0002"]
        for sub in subs { _ = try admin.command("SET", "siwa:user:{\(ServeStack.clientID):\(sub)}", "not a hash") }
        let address = "kept.address@privaterelay.appleid.com"
        // Spooled while Redis is down (a record refused live is answered 503 store_refused,
        // never set aside): the replay then finds the foreign keys and sets both aside.
        let responses = try stack.postWhileRedisIsDown([
            try stack.body(type: "email-enabled", sub: subs[0], email: address, isPrivateEmail: true),
            try stack.body(type: "consent-revoked", sub: subs[1]),
        ])
        #expect(responses.map(\.bodyText) == [#"{"status":"spooled"}"#, #"{"status":"spooled"}"#])
        let restarted = stack.redisConnection()  // the connection above ended with the restart
        #expect(stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_record_rejected").count == 2 })

        let list = try spool(stack, ["list"])
        #expect(!list.output.contains("@") && !list.output.contains("000060.s."), "no address, no sub")
        let records = ReconcileTests().logLines(list.output)
        try #require(records.map { $0["type"] ?? "" } == ["email-enabled", "consent-revoked"])
        #expect(records.allSatisfy { $0["why"] == "wrongtype" && $0["kind"] == "set_aside" })
        #expect(records.allSatisfy { $0["client_id"] == ServeStack.clientID && $0["records"] == "1" })
        #expect(records.allSatisfy { Int($0["age_seconds"] ?? "").map { $0 >= 0 && $0 < 600 } == true })
        let emailID = try #require(records[0]["id"])
        let consentID = try #require(records[1]["id"])

        let masked = try spool(stack, ["show", emailID])
        #expect(masked.status == 0)
        #expect(!masked.output.contains(address) && masked.output.contains("(masked: --show-address shows it)"))
        #expect(masked.output.contains(#""sub":"000060.s.0001""#))
        #expect(try spool(stack, ["show", emailID, "--show-address"]).output.contains(address))

        // The cause fixed for the first user: only that record goes back in line, and is applied once.
        _ = try restarted.command("DEL", "siwa:user:{\(ServeStack.clientID):\(subs[0])}")
        let requeued = try spool(stack, ["requeue", emailID])
        #expect(requeued.status == 0, "\(requeued.errors)")
        #expect(requeued.output.contains(#""requeued":1"#))
        #expect(try stack.waitUntil(timeout: 15) { try stack.userHash(sub: subs[0])["email"] == address })
        #expect(try listed(stack).map { $0["id"] ?? "" } == [consentID])
        let again = try spool(stack, ["requeue", emailID])
        #expect(again.status == 1)
        #expect(again.errors.contains("no set-aside or torn record with that ID"))

        // Discarding needs a reason; then it is gone, logged with the reason and the user.
        let noReason = try spool(stack, ["discard", consentID])
        #expect(noReason.status == 2)
        #expect(noReason.errors.contains("needs --reason"))
        #expect(try listed(stack).map { $0["id"] ?? "" } == [consentID])
        let discarded = try spool(stack, ["discard", consentID, "--reason", "test user, deleted by hand"])
        #expect(discarded.status == 0, "\(discarded.errors)")
        let log = try #require(
            ReconcileTests().logLines(discarded.errors).first { $0["event"] == "spool_record_discarded" })
        #expect(log["reason"] == "test user, deleted by hand")
        #expect(log["id"] == consentID && log["type"] == "consent-revoked" && log["why"] == "wrongtype")
        #expect(log["user"] == getpwuid(geteuid()).map { String(cString: $0.pointee.pw_name) })
        #expect(!discarded.errors.contains("000060.s.0002"))
        #expect(try listed(stack).isEmpty)
        #expect(try spool(stack, ["discard", consentID, "--reason", "again"]).status == 1)
        // Never applied: the user's key is still the foreign string.
        #expect(try restarted.command("TYPE", "siwa:user:{\(ServeStack.clientID):\(subs[1])}").string == "string")
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["rejected"] == "0")
        #expect(try restarted.command("XLEN", "siwa:events").integer == 1)
    }

    @Test(
        "with serve stopped: requeue one record, applied once at the next start; torn bytes: shown masked, not requeued, discarded"
    )
    func oneAtATimeStopped() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let rejected = stack.spoolDirectory + "/rejected"
        try FileManager.default.createDirectory(atPath: rejected, withIntermediateDirectories: true)
        let names = ["record-0001700000000000-7-1-wrongtype.log", "record-0001700000001000-7-2-aud_not_served.log"]
        for (index, name) in names.enumerated() {
            let line = SpoolRecoveryTests.recordLine(
                SpoolRecoveryTests.notification(sub: "000061.t.000\(index)", jti: "stopped-\(index)"))
            #expect(FileManager.default.createFile(atPath: rejected + "/" + name, contents: Data(line)))
        }
        let torn = stack.spoolDirectory + "/segment-0000000000000009.torn"
        #expect(
            FileManager.default.createFile(
                atPath: torn, contents: Data(#"{"v":2,"email":"torn.one@example.com","sub":"x"#.utf8)))

        let records = try listed(stack)
        #expect(
            records.map { $0["id"] ?? "" } == [
                "record-0001700000000000-7-1-wrongtype", "record-0001700000001000-7-2-aud_not_served",
                "torn-0000000000000009",
            ])
        #expect(records.map { $0["why"] ?? "" } == ["wrongtype", "aud_not_served", "damaged_bytes"])
        #expect(records[2]["type"] == "null" || records[2]["type"] == nil)

        let shownTorn = try spool(stack, ["show", "torn-0000000000000009"])
        #expect(shownTorn.status == 0)
        #expect(!shownTorn.output.contains("torn.one@example.com") && shownTorn.output.contains("(address masked)"))
        let tornRequeue = try spool(stack, ["requeue", "torn-0000000000000009"])
        #expect(tornRequeue.status == 1)
        #expect(tornRequeue.errors.contains("torn bytes are not a record"))
        #expect(FileManager.default.fileExists(atPath: torn))
        #expect(
            try spool(stack, ["discard", "torn-0000000000000009", "--reason", "read, nothing to save"]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: torn))
        // An ID is looked up among the listed files, never used as a path.
        #expect(try spool(stack, ["show", "../rejected/" + names[0]]).status == 1)

        let requeued = try spool(stack, ["requeue", "record-0001700000000000-7-1-wrongtype"])
        #expect(requeued.status == 0, "\(requeued.errors)")
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["depth"] == "1")
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["rejected"] == "1")
        try stack.startServe()
        #expect(try stack.waitUntil(timeout: 15) { try stack.userHash(sub: "000061.t.0000")["last_event_type"] != nil })
        #expect(try stack.streamLength() == 1)
        #expect(try stack.userHash(sub: "000061.t.0001").isEmpty)
        #expect(try listed(stack).map { $0["id"] ?? "" } == ["record-0001700000001000-7-2-aud_not_served"])
    }
}
