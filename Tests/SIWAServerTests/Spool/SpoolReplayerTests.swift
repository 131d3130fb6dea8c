import Foundation
import SIWARedis
import SIWASpool
import SIWASupport
import SIWATelemetry
import SIWAVerification
import Testing

/// The replayer driven by the in-process store double (no Redis): what it does with each
/// record, in order, and when a refusal sets one record aside or blocks them all.
@Suite("SpoolReplayer with the store double")
struct SpoolReplayerTests {
    static let clientIDs: Set<String> = ["com.example.app0", "com.example.app1"]

    func replayer(
        _ directory: String, _ store: NotificationStoreDouble, metrics: ServerMetrics = ServerMetrics(),
        log: EventLog.Sink = .standardError
    ) throws -> (SpoolReplayer, NotificationSpool, SpoolSetAsideStore) {
        let spool = try NotificationSpool(directory: directory)
        let rejected = try SpoolSetAsideStore(spoolDirectory: directory)
        let replayer = SpoolReplayer(
            spool: spool, rejected: rejected, store: store, metrics: metrics, clientIDs: Self.clientIDs,
            clock: .system, log: log)
        return (replayer, spool, rejected)
    }

    @Test("records reach the store in the order they were spooled, each step counted by outcome")
    func appliesInOrder() throws {
        try withSpoolDirectory { directory in
            let store = NotificationStoreDouble()
            store.answer(.outcome(.duplicate), forTokenID: "t2")
            let (replayer, spool, _) = try replayer(directory, store)
            for index in 1...5 { try spool.append(spoolNotification(index)) }

            let report = replayer.replayOnce()
            #expect(store.applied == ["t1", "t2", "t3", "t4", "t5"])
            #expect(report.taken == 5)
            #expect(report.count(.stored(.applied)) == 4)
            #expect(report.count(.stored(.duplicate)) == 1)
            #expect(report.count(.rejected) == 0)
            #expect(report.isComplete)
            #expect(spool.depth == 0)
            #expect(replayer.blockedReason == nil)
        }
    }

    @Test(
        "the pass's line, read in process from its log sink, counts a rejected record as `rejected`, and as `set_aside` for one release"
    )
    func passLineNamesRejectedRecords() throws {
        try withSpoolDirectory { directory in
            let store = NotificationStoreDouble()
            store.answer(.refused(RedisError(.serverError, RedisError.userKeyWrongTypeReply)), forTokenID: "t2")
            let logged = LoggedLines()
            let (replayer, spool, _) = try replayer(directory, store, log: logged.sink)
            for index in 1...3 { try spool.append(spoolNotification(index)) }

            #expect(replayer.replayOnce().count(.rejected) == 1)
            let passes = logged.lines(event: "spool_replayed")
            #expect(passes.count == 1, "\(logged.all)")
            let line = try #require(passes.first)
            #expect(line.contains(#""applied":2"#) && line.contains(#""remaining":0"#), "\(line)")
            #expect(line.contains(#""rejected":1,"set_aside":1"#), "\(line)")
            #expect(logged.lines(event: "spool_record_rejected").count == 1, "\(logged.all)")
        }
    }

    @Test("a refusal about one record keeps it in rejected/ and the records after it are applied")
    func refusalAboutTheRecordSetsItAside() throws {
        try withSpoolDirectory { directory in
            let store = NotificationStoreDouble()
            store.answer(
                .refused(RedisError(.serverError, RedisError.userKeyWrongTypeReply)), forTokenID: "t2")
            let metrics = ServerMetrics()
            let (replayer, spool, rejected) = try replayer(directory, store, metrics: metrics)
            for index in 1...3 { try spool.append(spoolNotification(index)) }

            let report = replayer.replayOnce()
            #expect(store.applied == ["t1", "t3"])
            #expect(report.taken == 3)
            #expect(report.count(.rejected) == 1)
            #expect(report.count(.stored(.applied)) == 2)
            #expect(report.isComplete)
            #expect(spool.depth == 0)
            #expect(replayer.blockedReason == nil)
            let kept = try FileManager.default.contentsOfDirectory(atPath: rejected.directory)
            #expect(kept.count == 1)
            #expect(kept.first?.hasSuffix("wrongtype.log") == true, "\(kept)")
            let rendered = metrics.render(spoolDepth: 0, jwksAgeSeconds: nil, jwksRefreshFailures: 0, jwksKeys: 0)
            #expect(rendered.contains("siwa_spool_rejected_total 1\n"))
            #expect(rendered.contains("siwa_spool_replayed_total 2\n"))
        }
    }

    @Test("a refusal about the deployment keeps every record queued, in order, and blocks the replay, named")
    func refusalAboutTheDeploymentBlocks() throws {
        try withSpoolDirectory { directory in
            let store = NotificationStoreDouble()
            store.answer(
                .refused(RedisError(.serverError, "NOPERM this user has no permissions to run the 'evalsha' command")),
                forTokenID: "t2")
            let (replayer, spool, rejected) = try replayer(directory, store)
            for index in 1...3 { try spool.append(spoolNotification(index)) }

            let report = replayer.replayOnce()
            #expect(store.applied == ["t1"])
            #expect(report.taken == 1)
            #expect(report.count(.rejected) == 0)
            #expect(!report.isComplete)
            #expect(spool.depth == 2)
            #expect(try FileManager.default.contentsOfDirectory(atPath: rejected.directory).isEmpty)
            #expect(replayer.blockedReason?.hasPrefix("Redis refuses the spooled records (NOPERM)") == true)

            // The cause is fixed: the next pass takes the same record first, then the rest.
            store.answer(.outcome(.applied), forTokenID: "t2")
            let resumed = replayer.replayOnce()
            #expect(store.applied == ["t1", "t2", "t3"])
            #expect(resumed.isComplete)
            #expect(spool.depth == 0)
            #expect(replayer.blockedReason == nil)
        }
    }

    @Test("a live account-deleted only notes the user: the set-aside records lose the address once the service runs")
    func accountDeletedScrubIsTheServicesWork() throws {
        try withSpoolDirectory { directory in
            let store = NotificationStoreDouble()
            let (replayer, _, rejected) = try replayer(directory, store)
            let address = "relay-scrub@privaterelay.appleid.com"
            let emailEvent = VerifiedNotification(
                clientID: "com.example.app0", subject: "000060.scrub.0001", type: .emailEnabled,
                rawType: "email-enabled", eventTimeMilliseconds: 1_796_000_000_000, tokenID: "scrub-1",
                issuedAt: 1_796_000_001, expiresAt: 1_796_086_401, email: address, isPrivateEmail: true)
            let path = try rejected.add(emailEvent)
            let deleted = VerifiedNotification(
                clientID: "com.example.app0", subject: "000060.scrub.0001", type: .accountDeleted,
                rawType: "account-delete", eventTimeMilliseconds: 1_796_000_100_000, tokenID: "scrub-2",
                issuedAt: 1_796_000_101, expiresAt: 1_796_086_501, email: nil, isPrivateEmail: nil)

            // What the request path calls: rejected/ is neither listed nor rewritten by it.
            replayer.accountDeleted(deleted)
            #expect(try String(contentsOfFile: path, encoding: .utf8).contains(address))

            // The service, once running, does the scrub (nudged: no poll interval to wait for).
            let services = ServiceGroup()
            services.start(replayer)
            defer { services.stop(until: .now + .seconds(10)) }
            let deadline = ContinuousClock.now + .seconds(10)
            while (try? String(contentsOfFile: path, encoding: .utf8).contains(address)) != false
                && ContinuousClock.now < deadline
            {
                Thread.sleep(forTimeInterval: 0.01)
            }
            let text = try String(contentsOfFile: path, encoding: .utf8)
            #expect(!text.contains(address))
            #expect(text.contains(#""jti":"scrub-1""#))
        }
    }

    @Test("at start, set-aside records of users Redis holds as deleted lose the address, once Redis answers")
    func startScrubWaitsForRedis() throws {
        try withSpoolDirectory { directory in
            let store = NotificationStoreDouble()
            let (replayer, _, rejected) = try replayer(directory, store)
            func emailEvent(_ sub: String, _ jti: String) -> VerifiedNotification {
                VerifiedNotification(
                    clientID: "com.example.app0", subject: sub, type: .emailEnabled, rawType: "email-enabled",
                    eventTimeMilliseconds: 1_796_000_000_000, tokenID: jti, issuedAt: 1_796_000_001,
                    expiresAt: 1_796_086_401, email: "relay-\(jti)@privaterelay.appleid.com", isPrivateEmail: true)
            }
            let deletedPath = try rejected.add(emailEvent("000061.gone.0001", "start-1"))
            let livingPath = try rejected.add(emailEvent("000061.here.0001", "start-2"))
            store.holdAccountDeleted(clientID: "com.example.app0", subject: "000061.gone.0001")

            // Redis does not answer: nothing is scrubbed, and the look is kept for later.
            store.answerPing(false)
            replayer.scrubUsersDeletedInRedis()
            #expect(try String(contentsOfFile: deletedPath, encoding: .utf8).contains("relay-start-1@"))
            // Redis answers: the deleted user's record loses its address, the other keeps it.
            store.answerPing(true)
            replayer.scrubUsersDeletedInRedis()
            let scrubbed = try String(contentsOfFile: deletedPath, encoding: .utf8)
            #expect(!scrubbed.contains("@"))
            #expect(scrubbed.contains(#""jti":"start-1""#))
            #expect(try String(contentsOfFile: livingPath, encoding: .utf8).contains("relay-start-2@"))
        }
    }
}
