import Foundation
import SIWAJSON
import SIWARedis
import SIWATestSupport
import SIWAVerification
import Testing

@testable import SIWAStore

#if canImport(Glibc)
    import Glibc
#endif

/// `siwa-endpoint transfer export` and `transfer import` end to end: the real binary, a real
/// redis-server, and the stand-in of Apple's token and user migration endpoints over HTTPS
/// under a test CA (Apple cannot be reached from a test; the stand-in checks the client
/// secret of each team, the bearer token, the team and the form as Apple does).
@Suite("transfer against a stand-in for Apple's user migration endpoint", .serialized)
struct TransferTests {
    static let client = TransferStack.clientID

    static func dateMilliseconds(_ text: String) -> Int64 {
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd"
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.locale = Locale(identifier: "en_US_POSIX")
        return Int64(formatter.date(from: text)!.timeIntervalSince1970 * 1000)
    }

    @Test(
        "export: transfer identifiers to hand over, the private mapping (0600), Redis records; a 429 slows down; a rerun skips"
    )
    func exportEndToEnd() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        stack.exporting("000060.a", label: "a", transferSub: "tr.a.0001")
        stack.exporting("000060.b", label: "b", transferSub: "tr.b.0002", answer: "error429_once")
        stack.exporting("000060.c", label: "c", transferSub: "tr.c.0003", answer: "invalid_request")
        try stack.start()
        let lines = ["000060.a", "000060.b", "", "000060.c", "bad{sub"]
        let run = try stack.run("export", lines)
        #expect(run.status == 1, "a refused and a malformed line: \(run.errors)")
        let outcomes = stack.outcomes(run.output)
        #expect(outcomes.map { $0["outcome"] ?? "" } == ["exported", "exported", "refused", "malformed"])
        #expect(outcomes.map { $0["line"] ?? "" } == ["1", "2", "4", "5"])
        #expect(outcomes.map { $0["sub"] ?? "-" } == ["000060.a", "000060.b", "000060.c", ""])
        #expect(outcomes[2]["error"] == "invalid_request")

        // The recipient's file: transfer identifiers only; the team's own mapping: 0600.
        #expect(stack.file("transfer-ids.txt") == "tr.a.0001\ntr.b.0002\n")
        #expect(
            stack.file("export-mapping.jsonl")
                == """
                {"sub":"000060.a","transfer_sub":"tr.a.0001"}
                {"sub":"000060.b","transfer_sub":"tr.b.0002"}
                {"sub":"000060.c","error":"invalid_request"}

                """)
        #expect(try stack.mode("export-mapping.jsonl") == 0o600)
        #expect(try stack.mode("transfer-ids.txt") == 0o644)

        // Redis: the window once, each user's record, nothing pending.
        let date = Self.dateMilliseconds(TransferStack.recentDate)
        #expect(
            try stack.hash("siwa:transfer:{\(Self.client)}")
                == [
                    "transfer_date": String(date), "closes_at": String(date + 60 * 86_400_000),
                    "target": TransferStack.recipientTeam,
                ])
        let exportedA = try stack.hash("siwa:transfer-from:{\(Self.client):000060.a}")
        #expect(exportedA["transfer_sub"] == "tr.a.0001" && exportedA["exported_at"] != nil)
        #expect(try stack.hash("siwa:transfer-id:{\(Self.client):tr.b.0002}")["from_sub"] == "000060.b")
        #expect(try stack.hash("siwa:transfer-from:{\(Self.client):000060.c}")["error"] == "invalid_request")
        #expect(try stack.members("siwa:transfer-pending:{\(Self.client)}:export").isEmpty)
        let expiry = try #require(
            try stack.base.redisConnection().command("PEXPIRETIME", "siwa:transfer-id:{\(Self.client):tr.a.0001}")
                .integer)
        #expect(expiry == date + 365 * 86_400_000)

        // Apple: one access token; the 429 retried; the refused user asked once.
        let log = try stack.migrationLog()
        #expect(
            log.filter { $0["grant"] == "client_credentials" }.map { $0["team"] ?? "" } == [TransferStack.senderTeam])
        #expect(
            log.filter { $0["endpoint"] == "migration" }.map { "\($0["label"] ?? "-"):\($0["answer"] ?? "")" } == [
                "a:ok", "b:error429", "b:ok", "c:invalid_request",
            ])
        // No access token, secret (a JWT) or request detail in the output or a log line.
        for text in [run.output, run.errors] {
            #expect(!text.contains("standin-migration-") && !text.contains("eyJ"))
        }

        // A rerun: the exported users skipped, the refused one asked again (Apple's answer may
        // have been "not yet"), no line written twice.
        let again = try stack.run("export", lines)
        #expect(again.status == 1)
        #expect(
            stack.outcomes(again.output).map { $0["outcome"] ?? "" } == ["skipped", "skipped", "refused", "malformed"])
        #expect(
            try stack.migrationLog().dropFirst(log.count).filter { $0["endpoint"] == "migration" }.map {
                "\($0["label"] ?? "-"):\($0["answer"] ?? "")"
            } == ["c:invalid_request"])
        #expect(stack.file("transfer-ids.txt") == "tr.a.0001\ntr.b.0002\n")
        #expect(stack.file("export-mapping.jsonl")?.split(separator: "\n").count == 3)
    }

    @Test(
        "import, one organisation: new subs, the old sub linked, what Redis held under a new sub reported, a deletion queued again"
    )
    func importLinksAndReportsEarlyNotifications() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        stack.exporting("000061.a", label: "a", transferSub: "tr.a.0001")
        stack.exporting("000061.b", label: "b", transferSub: "tr.b.0002")
        stack.importing("tr.a.0001", label: "a", sub: "000061.new.a", email: "a1b2@private.icloud.com")
        stack.importing("tr.b.0002", label: "b", sub: "000061.new.b", email: "c3d4@privaterelay.appleid.com")
        stack.importing("tr.x.0009", label: "x", sub: "000061.new.x", answer: "invalid_request")
        try stack.start()
        #expect(try stack.run("export", ["000061.a", "000061.b"]).status == 0)

        // Notifications under the new subs arrive before the team has exchanged them: signed as
        // Apple signs them, verified and stored by the real responder in the same Redis.
        let serve = try ServeStack(extraEnvironment: ["SIWA_REDIS_URL": stack.base.redis.url()])
        defer { serve.shutdown() }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        for (sub, type, time) in [
            ("000061.new.a", "consent-revoked", now - 20_000), ("000061.new.b", "account-deleted", now - 10_000),
        ] {
            let response = try serve.post(try serve.body(type: type, sub: sub, eventTimeMilliseconds: time))
            #expect(response.status == 200)
        }
        // serve's /metrics: the window recorded by the export (56 to 57 days left), nothing pending.
        let shown = try waitUntil(timeout: 20) {
            let metrics = try serve.request("GET", "/metrics").bodyText
            return metrics.contains(
                "siwa_transfer_users_pending{client_id=\"\(Self.client)\",direction=\"export\"} 0\n")
                && metrics.contains("siwa_transfer_window_seconds_left{client_id=\"\(Self.client)\"} 4")
        }
        #expect(shown)
        let deletionsBefore = try stack.base.redisConnection().command("XLEN", "siwa:deletions").integer
        #expect(deletionsBefore == 1)

        let run = try stack.run("import", ["tr.a.0001", "tr.b.0002", "tr.x.0009"], date: nil)
        #expect(run.status == 1, "one refused user: \(run.errors)")
        let outcomes = stack.outcomes(run.output)
        #expect(outcomes.map { $0["outcome"] ?? "" } == ["exchanged", "exchanged", "refused"])
        #expect(outcomes.map { $0["sub"] ?? "-" } == ["000061.new.a", "000061.new.b", "-"])
        #expect(outcomes.map { $0["from_sub"] ?? "-" } == ["000061.a", "000061.b", "-"])
        #expect(outcomes[0]["held.consent_revoked_at"] == String(now - 20_000))
        #expect(outcomes[0]["held.sessions_revoked_at"] == String(now - 20_000))
        #expect(outcomes[0]["deletion_queued"] == "false")
        #expect(outcomes[1]["held.account_deleted_at"] == String(now - 10_000))
        #expect(outcomes[1]["held.email_forwarding"] == "disabled")
        #expect(outcomes[1]["deletion_queued"] == "true")
        #expect(outcomes[2]["error"] == "invalid_request")
        #expect(!run.output.contains("@") && !run.errors.contains("@"), "no address on standard output or in a log")

        // The mapping for the team's database: 0600, the new relay addresses of both domains.
        #expect(
            stack.file("import-mapping.jsonl")
                == """
                {"transfer_sub":"tr.a.0001","sub":"000061.new.a","email":"a1b2@private.icloud.com","is_private_email":true,"from_sub":"000061.a"}
                {"transfer_sub":"tr.b.0002","sub":"000061.new.b","email":"c3d4@privaterelay.appleid.com","is_private_email":true,"from_sub":"000061.b"}
                {"transfer_sub":"tr.x.0009","error":"invalid_request"}

                """)
        #expect(try stack.mode("import-mapping.jsonl") == 0o600)

        // Redis: transfer id -> new sub; old sub <-> new sub in the user hashes.
        let record = try stack.hash("siwa:transfer-id:{\(Self.client):tr.a.0001}")
        #expect(record["sub"] == "000061.new.a" && record["from_sub"] == "000061.a" && record["exchanged_at"] != nil)
        let old = try stack.hash("siwa:user:{\(Self.client):000061.a}")
        #expect(old["transferred_to"] == "000061.new.a" && old["transferred_at"] == record["exchanged_at"])
        let new = try stack.hash("siwa:user:{\(Self.client):000061.new.a}")
        #expect(new["transferred_from"] == "000061.a" && new["consent_revoked_at"] == String(now - 20_000))
        #expect(try stack.hash("siwa:transfer-id:{\(Self.client):tr.x.0009}")["import_error"] == "invalid_request")
        #expect(try stack.hash("siwa:user:{\(Self.client):000061.new.x}").isEmpty)

        // The deletion found under a new sub counts in the deletion duty again, with the identifiers.
        let entries = (try stack.base.redisConnection().command("XRANGE", "siwa:deletions", "-", "+").array ?? [])
            .compactMap { $0.array?.last?.fieldMap }
        #expect(entries.count == 2)
        #expect(
            entries.last
                == [
                    "provider": "apple", "client_id": Self.client, "sub": "000061.new.b", "type": "account-deleted",
                    "event_time": String(now - 10_000), "applied": "0", "source": "transfer",
                    "transfer_sub": "tr.b.0002", "from_sub": "000061.b",
                ])

        // `user` takes either identifier: the transfer identifier resolves to the new sub; the
        // old sub shows the new sub's state too, and its session check counts the new sub's logout.
        let byTransferID = try CommandRun.endpoint(
            ["user", Self.client, "tr.a.0001"], environment: stack.environment(.recipient))
        #expect(byTransferID.status == 0)
        #expect(
            byTransferID.lines.prefix(2) == [
                "transfer_sub tr.a.0001 resolves to sub 000061.new.a", "key siwa:user:{\(Self.client):000061.new.a}",
            ])
        let byOldSub = try CommandRun.endpoint(
            ["user", Self.client, "000061.a", "--session-started", String(now - 30_000)],
            environment: stack.environment(.recipient))
        #expect(byOldSub.lines.contains("transferred to sub 000061.new.a: its events arrive under that sub now"))
        #expect(byOldSub.lines.contains("key siwa:user:{\(Self.client):000061.new.a}"))
        #expect(byOldSub.lines.contains("session not valid"))

        // Every user exchanged or refused: nothing pending; a rerun skips the exchanged, asks the
        // refused one again, queues nothing again.
        let windows = try TransferWindowReading.read(
            stack.base.redisConnection(), keys: RedisKeyLayout(), clientIDs: [Self.client])
        #expect(windows.windows.map { [$0.pendingExport, $0.pendingImport] } == [[0, 0]])
        let again = try stack.run("import", ["tr.a.0001", "tr.b.0002", "tr.x.0009"], date: nil)
        #expect(stack.outcomes(again.output).map { $0["outcome"] ?? "" } == ["skipped", "skipped", "refused"])
        #expect(try stack.base.redisConnection().command("XLEN", "siwa:deletions").integer == 2)
    }

    @Test("a run killed midway leaves whole lines and pending users; the rerun exchanges only those, once")
    func killedMidwayAndRerun() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        stack.importing("tr.k.0001", label: "k1", sub: "000062.new.1")
        stack.importing("tr.k.0002", label: "k2", sub: "000062.new.2", answer: "stall_once")
        stack.importing("tr.k.0003", label: "k3", sub: "000062.new.3")
        try stack.start()
        let identifiers = ["tr.k.0001", "tr.k.0002", "tr.k.0003"]

        // A client timeout longer than the stall: the run waits on k2's request until killed.
        let run = try EndpointProcess(
            try stack.arguments("import", identifiers),
            environment: stack.environment(.recipient).merging(["SIWA_APPLE_TIMEOUT_SECONDS": "30"]) { $1 })
        let stalled = try waitUntil(timeout: 30) {
            try stack.migrationLog().contains { $0["label"] == "k2" && $0["answer"] == "stall" }
        }
        run.stop()
        #expect(stalled)

        #expect(try stack.hash("siwa:transfer-id:{\(Self.client):tr.k.0001}")["sub"] == "000062.new.1")
        #expect(try stack.hash("siwa:transfer-id:{\(Self.client):tr.k.0002}").isEmpty)
        #expect(try stack.members("siwa:transfer-pending:{\(Self.client)}:import") == ["tr.k.0002", "tr.k.0003"])
        #expect(stack.file("import-mapping.jsonl") == #"{"transfer_sub":"tr.k.0001","sub":"000062.new.1"}"# + "\n")
        // What /metrics shows: two users not yet exchanged, the window's time left.
        let reading = try TransferWindowReading.read(
            stack.base.redisConnection(), keys: RedisKeyLayout(), clientIDs: [Self.client])
        let closesAt = Self.dateMilliseconds(TransferStack.recentDate) + 60 * 86_400_000
        let text = reading.metricsText(now: closesAt - 86_400_000)
        #expect(text.contains("siwa_transfer_users_pending{client_id=\"\(Self.client)\",direction=\"import\"} 2\n"))
        #expect(text.contains("siwa_transfer_users_pending{client_id=\"\(Self.client)\",direction=\"export\"} 0\n"))
        #expect(text.contains("siwa_transfer_window_seconds_left{client_id=\"\(Self.client)\"} 86400.0\n"))

        let rerun = try stack.run("import", identifiers, date: nil)
        #expect(rerun.status == 0, "\(rerun.errors)")
        #expect(stack.outcomes(rerun.output).map { $0["outcome"] ?? "" } == ["skipped", "exchanged", "exchanged"])
        #expect(
            stack.file("import-mapping.jsonl")
                == """
                {"transfer_sub":"tr.k.0001","sub":"000062.new.1"}
                {"transfer_sub":"tr.k.0002","sub":"000062.new.2"}
                {"transfer_sub":"tr.k.0003","sub":"000062.new.3"}

                """)
        #expect(try stack.members("siwa:transfer-pending:{\(Self.client)}:import").isEmpty)
        let asked = try stack.migrationLog().filter { $0["endpoint"] == "migration" }.map { $0["label"] ?? "" }
        #expect(asked == ["k1", "k2", "k2", "k3"])
    }

    @Test(
        "Redis lost in the middle of a run: exit 3, each user's record all or nothing, the rerun completes it without a line twice"
    )
    func redisLostMidRun() throws {
        let stack = try TransferStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        stack.exporting("000068.1", label: "m1", transferSub: "tr.m.0001")
        stack.exporting("000068.2", label: "m2", transferSub: "tr.m.0002", answer: "stall_once")
        stack.exporting("000068.3", label: "m3", transferSub: "tr.m.0003")
        // Apple holds m2's answer 8 s: time enough, on a loaded machine, to see the stall in
        // the log and stop Redis (an append-only one) before the answer comes.
        try stack.start(stallSeconds: 8)
        let identifiers = ["000068.1", "000068.2", "000068.3"]
        let output = stack.base.directory.appendingPathComponent("mid-run.out")
        let errors = stack.base.directory.appendingPathComponent("mid-run.err")
        let run = try EndpointProcess(
            try stack.arguments("export", identifiers),
            environment: stack.environment(.sender).merging([
                "SIWA_APPLE_TIMEOUT_SECONDS": "20", "SIWA_REDIS_TIMEOUT_MS": "500",
            ]) { $1 }, standardOutput: output, standardError: errors)
        let process = run.process
        // While Apple holds m2's answer, Redis goes away.
        let stalled = try waitUntil(timeout: 30) {
            try stack.migrationLog().contains { $0["label"] == "m2" && $0["answer"] == "stall" }
        }
        #expect(stalled)
        stack.base.redis.stop()
        process.waitUntilExit()
        #expect(process.terminationStatus == 3)
        let errorText = try String(contentsOf: errors, encoding: .utf8)
        #expect(errorText.contains("Redis failed"), "\(errorText)")
        #expect(
            stack.outcomes(try String(contentsOf: output, encoding: .utf8)).map { $0["outcome"] ?? "" } == ["exported"]
        )

        try stack.base.redis.restart()
        #expect(try stack.hash("siwa:transfer-from:{\(Self.client):000068.1}")["transfer_sub"] == "tr.m.0001")
        // Apple answered m2 and its lines were written, then Redis failed: none of its record.
        #expect(try stack.hash("siwa:transfer-from:{\(Self.client):000068.2}").isEmpty)
        #expect(try stack.hash("siwa:transfer-id:{\(Self.client):tr.m.0002}").isEmpty)
        #expect(try stack.members("siwa:transfer-pending:{\(Self.client)}:export") == ["000068.2", "000068.3"])
        #expect(stack.file("transfer-ids.txt") == "tr.m.0001\ntr.m.0002\n")
        let rerun = try stack.run("export", identifiers, date: nil)
        #expect(rerun.status == 0, "\(rerun.errors)")
        #expect(stack.outcomes(rerun.output).map { $0["outcome"] ?? "" } == ["skipped", "exported", "exported"])
        #expect(stack.file("transfer-ids.txt") == "tr.m.0001\ntr.m.0002\ntr.m.0003\n")
        #expect(
            stack.file("export-mapping.jsonl")
                == """
                {"sub":"000068.1","transfer_sub":"tr.m.0001"}
                {"sub":"000068.2","transfer_sub":"tr.m.0002"}
                {"sub":"000068.3","transfer_sub":"tr.m.0003"}

                """)
        #expect(try stack.hash("siwa:transfer-id:{\(Self.client):tr.m.0002}")["from_sub"] == "000068.2")
    }

    @Test(
        "the access token: invalid_grant renews it once; renewed before it runs out; invalid_client stops with exit 2")
    func accessTokenRenewalAndInvalidClient() throws {
        // Apple stops honouring each token after two uses: the third user renews it, once.
        let stack = try TransferStack()
        defer { stack.shutdown() }
        for index in 1...4 { stack.exporting("000063.\(index)", label: "u\(index)", transferSub: "tr.u.000\(index)") }
        try stack.start(accessTokenUses: 2)
        let run = try stack.run("export", (1...4).map { "000063.\($0)" })
        #expect(run.status == 0, "\(run.errors)")
        #expect(
            stack.outcomes(run.output).map { $0["outcome"] ?? "" } == ["exported", "exported", "exported", "exported"])
        let log = try stack.migrationLog()
        #expect(log.filter { $0["grant"] == "client_credentials" }.count == 2)
        #expect(
            log.filter { $0["endpoint"] == "migration" }.map { "\($0["label"] ?? "-"):\($0["answer"] ?? "")" } == [
                "u1:ok", "u2:ok", "-:invalid_grant", "u3:ok", "u4:ok",
            ])
        #expect(ReconcileTests().logLines(run.errors).last?["access_tokens"] == "2")

        // A token that lives five seconds is renewed before it runs out (a fifth early, at
        // 4 s): never refused. Seven users a second: the run outlives the first token, and
        // the last use of it has a second to reach the stand-in.
        let short = try TransferStack()
        defer { short.shutdown() }
        for index in 1...7 { short.exporting("000064.\(index)", label: "s\(index)", transferSub: "tr.s.000\(index)") }
        try short.start(accessTokenSeconds: 5)
        let paced = try short.run("export", (1...7).map { "000064.\($0)" }, rate: "1")
        #expect(paced.status == 0, "\(paced.errors)")
        let shortLog = try short.migrationLog()
        #expect(shortLog.filter { $0["grant"] == "client_credentials" }.count >= 2)
        #expect(!shortLog.contains { $0["answer"] == "invalid_grant" })

        // invalid_client: our configuration; the run stops at once, nothing recorded.
        let wrong = try TransferStack()
        defer { wrong.shutdown() }
        wrong.exporting("000065.a", label: "a", transferSub: "tr.w.0001")
        try wrong.start()
        let refused = try wrong.run(
            "export", ["000065.a", "000065.b"], overriding: ["SIWA_APPLE_PRIVATE_KEY_FILE": wrong.base.wrongKeyPath])
        #expect(refused.status == 2)
        #expect(
            refused.errors.contains("Apple refused the client (invalid_client) for client ID \(Self.client) at line 1"))
        #expect(refused.output.isEmpty)
        #expect(try wrong.migrationLog().map { $0["problem"] ?? "" } == ["signature"])
        #expect(wrong.file("export-mapping.jsonl") == "" && wrong.file("transfer-ids.txt") == "")
        #expect(try wrong.hash("siwa:transfer-from:{\(Self.client):000065.a}").isEmpty)
        #expect(try wrong.members("siwa:transfer-pending:{\(Self.client)}:export") == ["000065.a", "000065.b"])
    }

    @Test("on a terminal: progress with the users done and an estimate of the time left")
    func progressOnATerminal() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        for index in 1...3 { stack.exporting("000067.\(index)", label: "p\(index)", transferSub: "tr.p.000\(index)") }
        try stack.start()
        // script(1) gives the command a terminal; what it wrote there comes out on script's stdout.
        let command = ([EndpointBinary.url.path] + (try stack.arguments("export", (1...3).map { "000067.\($0)" })))
            .joined(separator: " ")
        let run = try CommandRun.run(
            URL(fileURLWithPath: "/usr/bin/script"), ["-qefc", command, "/dev/null"],
            environment: stack.environment(.sender))
        #expect(run.status == 0, "\(run.output)")
        #expect(run.output.contains("\r\u{1B}[Ktransfer export: 1/3, about "))
        #expect(run.output.contains("\r\u{1B}[Ktransfer export: 3/3, about 0m0s left"))
        #expect(run.output.components(separatedBy: #""outcome":"exported""#).count == 4)
    }

    @Test(
        "refused before Apple is asked: no transfer date, another date, a closed window (exit 2); Redis down (exit 3)")
    func refusalsBeforeAnyRequest() throws {
        let stack = try TransferStack()
        defer { stack.shutdown() }
        stack.exporting("000066.a", label: "a", transferSub: "tr.r.0001")
        try stack.start()
        let noDate = try stack.run("export", ["000066.a"], date: nil)
        #expect(noDate.status == 2)
        #expect(noDate.errors.contains("no transfer date is recorded for \(Self.client): give --transfer-date"))
        // Closed ten days ago (its records would still live): refused, and not recorded.
        let closed = try stack.run("export", ["000066.a"], date: TransferStack.date(daysAgo: 70))
        #expect(closed.status == 2)
        #expect(closed.errors.contains("closed at \(TransferStack.date(daysAgo: 10))T00:00:00.000Z"))
        #expect(try stack.hash("siwa:transfer:{\(Self.client)}").isEmpty, "a closed window's date is not recorded")

        #expect(try stack.run("export", ["000066.a"]).status == 0)
        let otherDate = try stack.run("export", ["000066.a"], date: TransferStack.date(daysAgo: 2))
        #expect(otherDate.status == 2)
        #expect(otherDate.errors.contains("it is recorded once"))

        try FileManager.default.removeItem(atPath: stack.outDirectory)
        stack.base.redis.shutdown()
        let down = try stack.run("import", ["tr.r.0001"], overriding: ["SIWA_REDIS_TIMEOUT_MS": "300"])
        #expect(down.status == 3)
        #expect(down.errors.contains("Redis failed"))
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: stack.outDirectory).sorted() == ["import-mapping.jsonl"]
        )
        #expect(stack.file("import-mapping.jsonl") == "", "checked (made) before Redis, nothing written in it")
        #expect(try stack.migrationLog().filter { $0["endpoint"] == "migration" }.count == 1)
    }
}
