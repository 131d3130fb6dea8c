import Foundation
import Glibc
import SIWATestKit
import SIWAVerification
import Testing

@testable import SIWASpool

/// The spool on a bad day, end to end with the real `serve`: a full disk, a long spool at
/// start, a record that reads back damaged, records for an app no longer served, a
/// hand-placed file of megabytes, set-aside records put back in line, old files expired,
/// and what stays of a deleted account.
@Suite("Spool recovery, end to end", .serialized)
struct SpoolRecoveryTests {
    /// One spool record line for `notification`, as serve writes it.
    static func recordLine(_ notification: VerifiedNotification) -> [UInt8] {
        SpoolRecord.encode(notification, spooledAt: Int64(Date().timeIntervalSince1970 * 1000))
    }

    static func notification(sub: String, clientID: String = ServeStack.clientID, jti: String) -> VerifiedNotification {
        let now = Int64(Date().timeIntervalSince1970)
        return VerifiedNotification(
            clientID: clientID, subject: sub, type: .consentRevoked, rawType: "consent-revoked",
            eventTimeMilliseconds: (now - 5) * 1000, tokenID: jti, issuedAt: now - 1, expiresAt: now + 86_400,
            email: nil, isPrivateEmail: nil)
    }

    /// Writes a segment file by hand into `directory` (created 0700 if needed).
    static func placeSegment(_ lines: [[UInt8]], sequence: UInt64, in directory: String) throws {
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let path = directory + "/segment-" + NotificationSpool.paddedSequence(sequence) + ".log"
        #expect(FileManager.default.createFile(atPath: path, contents: Data(lines.joined())))
    }

    // MARK: - A full disk

    /// The issue's reproduction on a 128 KiB tmpfs mounted by the test: Redis down, posts
    /// until the spool is full. Then a failed append leaves no empty segment, /healthz is
    /// 503 while the spool takes no writes, and once Redis is back replay records its
    /// progress without new space and applies every record answered 200.
    @Test("a full disk: no empty segments, /healthz 503, and replay still makes progress")
    func fullDisk() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let mountPoint = stack.directory.appendingPathComponent("small-disk").path
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: false)
        let mounted = Self.command("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=128k,mode=0700", "tmpfs", mountPoint])
        try #require(
            mounted.status == 0,
            "this test mounts a 128 KiB tmpfs and needs root to do it; the machine refused: \(mounted.output)")
        defer {
            stack.serve?.kill()
            _ = Self.command("/usr/bin/umount", [mountPoint])
        }
        let spool = mountPoint + "/spool"
        var stackEnvironment = stack.environment
        stackEnvironment["SIWA_SPOOL_DIR"] = spool
        stack.serve = try ServeProcess(
            environment: stackEnvironment, socketPath: stack.socketPath,
            logURL: stack.directory.appendingPathComponent("serve.log"))
        stack.redis.kill()

        var spooled: [String] = []
        var refused = 0
        for index in 1...1200 where refused < 5 {
            let sub = String(format: "000030.d.%04d", index)
            let response = try stack.post(try stack.body(type: "consent-revoked", sub: sub))
            if response.bodyText == #"{"status":"spooled"}"# {
                spooled.append(sub)
            } else {
                #expect(response.status == 503)
                #expect(response.jsonFields["error"] == "store_unavailable")
                refused += 1
            }
        }
        try #require(refused == 5, "the 128 KiB spool never filled up")
        #expect(spooled.count > 50)
        let segments = try FileManager.default.contentsOfDirectory(atPath: spool).filter { $0.hasSuffix(".log") }
        for name in segments {
            #expect(SpoolFileSystem.status(spool + "/" + name)?.size ?? 0 > 0, "empty segment left behind: \(name)")
        }
        let full = try stack.health()
        #expect(full.status == 503)
        #expect((full.jsonFields["reason"] ?? "").contains("the spool cannot take writes"))

        try stack.redis.start()
        #expect(try stack.waitUntil(timeout: 60) { try stack.streamLength() == Int64(spooled.count) })
        // The depth drops once a pass has freed its segment, just after the last write.
        #expect(
            try stack.waitUntil(timeout: 15) {
                let health = try stack.health()
                return health.status == 200 && health.jsonFields["spool_depth"] == "0"
            })
        for sub in [spooled.first!, spooled.last!] {
            #expect(try stack.userHash(sub: sub)["last_event_type"] == "consent-revoked")
        }
        #expect(stack.serve?.logLines(event: "spool_replay_blocked") == [])
        // And the spool takes writes again.
        stack.redis.kill()
        let after = try stack.post(try stack.body(type: "consent-revoked", sub: "000030.d.9999"))
        #expect(after.bodyText == #"{"status":"spooled"}"#)
    }

    static func command(_ path: String, _ arguments: [String]) -> (status: Int32, output: String) {
        do {
            let run = try CommandRun.run(URL(fileURLWithPath: path), arguments, timeout: .seconds(60))
            return (run.status, run.output + run.errors)
        } catch {
            return (-1, "\(error)")
        }
    }

    // MARK: - Start, depth, defence in depth

    /// A long spool at start is replayed after the socket listens, by the replayer.
    @Test("a spool left by a crash is replayed after serve listens, not before")
    func listensBeforeReplaying() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let lines = (1...1000).map {
            Self.recordLine(Self.notification(sub: String(format: "000031.e.%05d", $0), jti: "start-\($0)"))
        }
        try Self.placeSegment(lines, sequence: 1, in: stack.spoolDirectory)
        try stack.startServe()
        #expect(try stack.waitUntil(timeout: 60) { try stack.streamLength() == 1000 })
        // The pass logs once it has committed its last record, a moment after Redis has it.
        #expect(stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_replayed").isEmpty == false })
        let log = stack.serve?.logText.split(separator: "\n").map(String.init) ?? []
        let started = log.firstIndex { $0.contains(#""event":"started""#) }
        let replayed = log.firstIndex { $0.contains(#""event":"spool_replayed""#) }
        try #require(started != nil && replayed != nil)
        #expect(started! < replayed!, "the socket must listen before the start-up replay ends")
        #expect(log.contains { $0.contains(#""event":"spool_pending_at_start""#) && $0.contains(#""depth":1000"#) })
    }

    /// A record counted at append that reads back damaged is set aside, and the depth
    /// /healthz shows is recounted from disk: 0, not 1.
    @Test("a spooled record damaged on disk: set aside as torn, and the depth is recounted to 0")
    func depthIsRecountedFromDisk() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        stack.redis.kill()
        let response = try stack.post(try stack.body(type: "consent-revoked", sub: "000032.f.0001"))
        #expect(response.bodyText == #"{"status":"spooled"}"#)
        #expect(try stack.health().jsonFields["spool_depth"] == "1")
        let segment = try #require(
            try FileManager.default.contentsOfDirectory(atPath: stack.spoolDirectory).first {
                $0.hasSuffix(".log") && (SpoolFileSystem.status(stack.spoolDirectory + "/" + $0)?.size ?? 0) > 0
            })
        // A bit flips inside the record's JSON: its checksum no longer matches.
        let handle = try #require(FileHandle(forUpdatingAtPath: stack.spoolDirectory + "/" + segment))
        handle.seek(toFileOffset: 40)
        var byte = [UInt8](handle.readData(ofLength: 1))
        byte[0] ^= 0x01
        handle.seek(toFileOffset: 40)
        handle.write(Data(byte))
        try handle.close()

        try stack.redis.start()
        #expect(
            try stack.waitUntil(timeout: 15) {
                try stack.request("GET", "/metrics").bodyText.contains("siwa_spool_torn_records_total 1\n")
            })
        #expect(
            try stack.waitUntil(timeout: 10) { try stack.health().jsonFields["spool_depth"] == "0" })
        #expect(try stack.health().status == 200)
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["torn_files"] == "1")
        #expect(try stack.redisSnapshot() == [])
    }

    /// Replay checks each record again: an aud no longer served, or a sub that would break
    /// the key layout, is set aside, never written; the records around them apply.
    @Test("replay re-checks aud against SIWA_CLIENT_IDS and the key parts")
    func replayRechecksEachRecord() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let lines = [
            Self.recordLine(Self.notification(sub: "000033.g.0001", jti: "recheck-1")),
            Self.recordLine(Self.notification(sub: "000033.g.0002", clientID: "com.not.served", jti: "recheck-2")),
            Self.recordLine(Self.notification(sub: "000033.g}{0003", jti: "recheck-3")),
            Self.recordLine(Self.notification(sub: "000033.g.0004", jti: "recheck-4")),
        ]
        try Self.placeSegment(lines, sequence: 1, in: stack.spoolDirectory)
        try stack.startServe()
        #expect(try stack.waitUntil(timeout: 15) { try stack.streamLength() == 2 })
        #expect(
            stack.waitUntil(timeout: 10) { stack.serve?.logLines(event: "spool_record_rejected").count == 2 })
        let rejected = stack.serve?.logLines(event: "spool_record_rejected") ?? []
        #expect(rejected.first?.contains(#""error":"aud_not_served""#) == true)
        #expect(rejected.last?.contains(#""error":"redis_unsafe_key""#) == true)
        #expect(try stack.userHash(sub: "000033.g.0001")["last_event_type"] == "consent-revoked")
        #expect(try stack.userHash(sub: "000033.g.0004")["last_event_type"] == "consent-revoked")
        #expect(try stack.userHash(sub: "000033.g.0002", clientID: "com.not.served") == [:])
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["rejected"] == "2")
        // The former name beside it, for one release.
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["set_aside"] == "2")
        // The pass logs its counts once it has committed its last record.
        #expect(stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_replayed").isEmpty == false })
        let serve = try #require(stack.serve)
        #expect(serve.replayedTotal("applied") == 2)
        #expect(serve.replayedTotal("rejected") == 2)
        #expect(serve.replayedTotal("set_aside") == 2)
    }

    /// A hand-placed 5 MB segment is read in bounded pieces: serve's peak memory with it
    /// stays within a few MB of serve's with an empty spool (reading it whole costs 5 MB+).
    @Test("a hand-placed 5 MB segment is not read whole")
    func largeSegmentIsReadInPieces() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        stack.redis.stop()  // the records stay; only the counting at start reads them
        try stack.startServe()
        _ = try stack.health()
        let baseline = try Self.peakMemoryKiB(stack)
        stack.serve?.kill()

        let line = Self.recordLine(Self.notification(sub: "000034.h.0001", jti: "big"))
        let copies = 5_000_000 / line.count + 1
        try Self.placeSegment(Array(repeating: line, count: copies), sequence: 1, in: stack.spoolDirectory)
        try stack.startServe()
        #expect(try stack.health().jsonFields["spool_depth"] == String(copies))
        let withBigSegment = try Self.peakMemoryKiB(stack)
        #expect(
            withBigSegment - baseline < 2500,
            "peak memory grew by \(withBigSegment - baseline) KiB with a 5 MB segment (baseline \(baseline) KiB)")
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["depth"] == String(copies))
    }

    static func peakMemoryKiB(_ stack: ServeStack) throws -> Int {
        let pid = try #require(stack.serve?.process.processIdentifier)
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") })
        return try #require(Int(line.split(separator: " ").dropFirst().first ?? ""))
    }

    /// A replay position that cannot be read stops serve with a message naming the file:
    /// numbering segments anew could let an older position skip records later.
    @Test("an unreadable replay position stops serve with a message naming the file")
    func unreadablePositionStopsServe() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        try Self.placeSegment(
            [Self.recordLine(Self.notification(sub: "000040.n.0001", jti: "pos"))], sequence: 7,
            in: stack.spoolDirectory)
        let position = stack.spoolDirectory + "/replay-position"
        #expect(FileManager.default.createFile(atPath: position, contents: Data(repeating: 0x78, count: 128)))
        let result = try CommandRun.endpoint(["serve"], environment: stack.environment)
        #expect(result.status != 0)
        #expect(result.errors.contains("spool_position_unreadable"))
        #expect(result.errors.contains(position))
        #expect(!result.errors.contains(#""event":"started""#))
        #expect(try stack.redisSnapshot() == [])
    }

    // MARK: - Set aside, put back in line

    /// A record Redis refuses for a reason about the record is set aside; `spool status`
    /// counts it; once the cause is fixed `spool requeue` puts it back in line, with serve
    /// running or stopped, and it is applied exactly once.
    @Test("spool status and spool requeue, with serve running and stopped")
    func requeueSetAsideRecords() throws {
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        let keys = ["000035.i.0001", "000035.i.0002"].map { "siwa:user:{\(ServeStack.clientID):\($0)}" }
        for key in keys { _ = try stack.redisConnection().command("SET", key, "not a hash") }
        let responses = try stack.postWhileRedisIsDown(
            try ["000035.i.0001", "000035.i.0002"].map { try stack.body(type: "consent-revoked", sub: $0) })
        for response in responses { #expect(response.bodyText == #"{"status":"spooled"}"#) }
        let admin = stack.redisConnection()
        #expect(stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_record_rejected").count == 2 })
        var status = try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)
        #expect(status["rejected"] == "2")
        #expect(status["depth"] == "0")
        // Rejected records are not counted as applied.
        #expect(try stack.request("GET", "/metrics").bodyText.contains("siwa_spool_replayed_total 0\n"))

        // The cause is fixed for the first user; requeued while serve runs.
        _ = try admin.command("DEL", keys[0])
        let running = try CommandRun.endpoint(
            ["spool", "requeue"], environment: ["SIWA_SPOOL_DIR": stack.spoolDirectory])
        #expect(running.status == 0)
        #expect(running.output.contains(#""requeued":2"#))
        #expect(try stack.waitUntil(timeout: 15) { try stack.userHash(sub: "000035.i.0001")["last_event_type"] != nil })
        // The second is refused again (its key is still wrong) and set aside again.
        #expect(stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_record_rejected").count == 3 })
        status = try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)
        #expect(status["rejected"] == "1")
        #expect(status["depth"] == "0")

        // Requeued while serve is stopped: applied at its next start.
        stack.serve?.terminate()
        #expect(stack.serve?.waitForExit(timeout: 20) == 0)
        _ = try admin.command("DEL", keys[1])
        let stopped = try CommandRun.endpoint(
            ["spool", "requeue", "--spool-dir", stack.spoolDirectory], environment: [:])
        #expect(stopped.output.contains(#""requeued":1"#))
        #expect(try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)["depth"] == "1")
        try stack.startServe()
        #expect(try stack.waitUntil(timeout: 15) { try stack.userHash(sub: "000035.i.0002")["last_event_type"] != nil })
        // Each applied once: one stream entry per user, all applied.
        let entries = try #require(try admin.command("XRANGE", "siwa:events", "-", "+").array)
        #expect(entries.count == 2)
        status = try SpoolDeadEndTests.spoolStatus(stack.spoolDirectory)
        #expect(status["rejected"] == "0")
        #expect(status["depth"] == "0")
        #expect(
            try CommandRun.endpoint(
                ["spool", "requeue", "--spool-dir", stack.spoolDirectory], environment: [:]
            ).output.contains(#""requeued":0"#))
    }

    /// Set-aside and torn files older than SIWA_SPOOL_RETENTION_DAYS are deleted, each
    /// with a log line; younger ones stay.
    @Test("set-aside and torn files are deleted after the retention, with a log line")
    func oldFilesExpire() throws {
        let stack = try ServeStack(extraEnvironment: ["SIWA_SPOOL_RETENTION_DAYS": "14"], startingServe: false)
        defer { stack.shutdown() }
        let rejected = stack.spoolDirectory + "/rejected"
        try FileManager.default.createDirectory(atPath: rejected, withIntermediateDirectories: true)
        let line = Data(Self.recordLine(Self.notification(sub: "000036.j.0001", jti: "old")))
        let files = [
            (rejected + "/record-old.log", 15), (stack.spoolDirectory + "/segment-old.torn", 20),
            (rejected + "/record-young.log", 13), (stack.spoolDirectory + "/segment-young.torn", 1),
        ]
        for (path, days) in files {
            #expect(FileManager.default.createFile(atPath: path, contents: line))
            try FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(-Double(days) * 86_400)], ofItemAtPath: path)
        }
        try stack.startServe()
        #expect(stack.waitUntil(timeout: 10) { stack.serve?.logLines(event: "spool_file_expired").count == 2 })
        let expired = stack.serve?.logLines(event: "spool_file_expired") ?? []
        #expect(expired.contains { $0.contains("record-old.log") && $0.contains(#""kind":"set_aside""#) })
        #expect(expired.contains { $0.contains("segment-old.torn") && $0.contains(#""kind":"torn""#) })
        #expect(!FileManager.default.fileExists(atPath: files[0].0))
        #expect(!FileManager.default.fileExists(atPath: files[1].0))
        #expect(FileManager.default.fileExists(atPath: files[2].0))
        #expect(FileManager.default.fileExists(atPath: files[3].0))
    }

    // MARK: - What is kept

    /// After account-deleted no address of the user is in the stream, the hash or the spool.
    @Test("after account-deleted no email address remains in the stream, the hash or the spool")
    func noAddressOutlivesTheAccount() throws {
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        let sub = "000037.k.0001"
        let address = "relay-37@privaterelay.appleid.com"
        let now = Int64(Date().timeIntervalSince1970)
        #expect(
            try stack.post(
                try stack.body(
                    type: "email-enabled", sub: sub, eventTimeMilliseconds: (now - 20) * 1000, email: address,
                    isPrivateEmail: true)
            ).bodyText == #"{"status":"applied"}"#)
        // Redis goes away: the next email event and the deletion wait in the spool.
        stack.redis.kill()
        #expect(
            try stack.post(
                try stack.body(
                    type: "email-disabled", sub: sub, eventTimeMilliseconds: (now - 10) * 1000, email: address,
                    isPrivateEmail: true)
            ).bodyText == #"{"status":"spooled"}"#)
        #expect(
            try stack.post(try stack.body(type: "account-deleted", sub: sub, eventTimeMilliseconds: (now - 5) * 1000))
                .bodyText == #"{"status":"spooled"}"#)
        try stack.redis.start()
        #expect(try stack.waitUntil(timeout: 15) { try stack.streamLength() == 3 })
        // Logged after the pass deleted the replayed segment.
        #expect(stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_replayed").isEmpty == false })
        #expect(
            try stack.waitUntil(timeout: 10) { try stack.health().jsonFields["spool_depth"] == "0" })
        let entries = try #require(try stack.redisConnection().command("XRANGE", "siwa:events", "-", "+").array)
        for entry in entries {
            let fields = entry.array?.last?.array?.compactMap(\.string) ?? []
            #expect(!fields.contains { $0.contains("@") }, "a stream entry holds an address: \(fields)")
        }
        #expect(try stack.userHash(sub: sub)["email"] == nil)
        let spoolFiles = try FileManager.default.subpathsOfDirectory(atPath: stack.spoolDirectory)
        for name in spoolFiles {
            let bytes = (try? Data(contentsOf: URL(fileURLWithPath: stack.spoolDirectory + "/" + name))) ?? Data()
            #expect(!String(decoding: bytes, as: UTF8.self).contains("@"), "\(name) holds an address")
        }
        let log = stack.serve?.logText ?? ""
        #expect(!log.contains("@"))
    }

    /// A set-aside email event keeps its address only until the user's account-deleted.
    @Test("account-deleted removes the user's address from set-aside records")
    func accountDeletedScrubsSetAsideRecords() throws {
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        let sub = "000039.m.0001"
        let key = "siwa:user:{\(ServeStack.clientID):\(sub)}"
        _ = try stack.redisConnection().command("SET", key, "not a hash")
        let now = Int64(Date().timeIntervalSince1970)
        let responses = try stack.postWhileRedisIsDown([
            try stack.body(
                type: "email-enabled", sub: sub, eventTimeMilliseconds: (now - 20) * 1000,
                email: "relay-39@privaterelay.appleid.com", isPrivateEmail: true)
        ])
        #expect(responses.map(\.bodyText) == [#"{"status":"spooled"}"#])
        #expect(stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_record_rejected").count == 1 })
        let rejected = stack.spoolDirectory + "/rejected"
        func setAsideText() throws -> String {
            try FileManager.default.contentsOfDirectory(atPath: rejected).filter { $0.hasSuffix(".log") }
                .map { try String(contentsOfFile: rejected + "/" + $0, encoding: .utf8) }.joined()
        }
        #expect(try setAsideText().contains("relay-39@privaterelay.appleid.com"))

        _ = try stack.redisConnection().command("DEL", key)
        #expect(
            try stack.post(try stack.body(type: "account-deleted", sub: sub, eventTimeMilliseconds: (now - 5) * 1000))
                .bodyText == #"{"status":"applied"}"#)
        // The replayer's thread scrubs, nudged by the request: awaited, with a bound for a loaded machine.
        #expect(
            stack.waitUntil(timeout: 15) { stack.serve?.logLines(event: "spool_rejected_email_removed").count == 1 })
        #expect(try !setAsideText().contains("@"))
        #expect(try setAsideText().contains(#""jti":"#))
        // Put back in line, the email event is stale: no address comes back.
        _ = try CommandRun.endpoint(
            ["spool", "requeue", "--spool-dir", stack.spoolDirectory], environment: [:])
        #expect(try stack.waitUntil(timeout: 15) { try stack.streamLength() == 2 })
        #expect(try stack.userHash(sub: sub)["email"] == nil)
    }

    /// A crash between a live account-deleted's 200 and the replayer's scrub leaves the
    /// user's set-aside records with their address; the next start scrubs them. Made
    /// deterministic: the account-deleted is applied (200), serve is SIGKILLed, and the
    /// set-aside records the scrub would have reached are placed while it is down.
    @Test("a scrub lost to a crash after account-deleted is done at the next start")
    func scrubLostToACrashIsDoneAtStart() throws {
        let stack = try ServeStack(appendOnlyRedis: true)
        defer { stack.shutdown() }
        let deletedSub = "000040.n.0001"
        let livingSub = "000040.n.0002"
        let now = Int64(Date().timeIntervalSince1970)
        #expect(
            try stack.post(
                try stack.body(type: "account-deleted", sub: deletedSub, eventTimeMilliseconds: (now - 5) * 1000)
            ).bodyText == #"{"status":"applied"}"#)
        stack.serve?.kill()
        try #require(stack.serve?.waitForExit(timeout: 10) != nil)

        func emailRecord(sub: String, jti: String) -> VerifiedNotification {
            VerifiedNotification(
                clientID: ServeStack.clientID, subject: sub, type: .emailEnabled, rawType: "email-enabled",
                eventTimeMilliseconds: (now - 20) * 1000, tokenID: jti, issuedAt: now - 1, expiresAt: now + 86_400,
                email: "relay-\(jti)@privaterelay.appleid.com", isPrivateEmail: true)
        }
        let rejected = stack.spoolDirectory + "/rejected"
        let deletedFile =
            rejected + "/record-" + NotificationSpool.paddedSequence(UInt64(now * 1000)) + "-1-1-redis_wrongtype.log"
        let livingFile =
            rejected + "/record-" + NotificationSpool.paddedSequence(UInt64(now * 1000)) + "-1-2-redis_wrongtype.log"
        #expect(
            FileManager.default.createFile(
                atPath: deletedFile, contents: Data(Self.recordLine(emailRecord(sub: deletedSub, jti: "lost-1"))),
                attributes: [.posixPermissions: 0o600]))
        #expect(
            FileManager.default.createFile(
                atPath: livingFile, contents: Data(Self.recordLine(emailRecord(sub: livingSub, jti: "lost-2"))),
                attributes: [.posixPermissions: 0o600]))

        try stack.startServe()
        #expect(
            stack.waitUntil(timeout: 30) { stack.serve?.logLines(event: "spool_rejected_email_removed").count == 1 })
        let deletedText = try String(contentsOfFile: deletedFile, encoding: .utf8)
        #expect(!deletedText.contains("@"))
        #expect(deletedText.contains(#""jti":"lost-1""#))
        // Another user's set-aside record keeps its address until their own account-deleted.
        #expect(try String(contentsOfFile: livingFile, encoding: .utf8).contains("relay-lost-2@privaterelay"))
        #expect(try stack.userHash(sub: livingSub) == [:])
    }

    /// An authentic event_time later than iat plus the leeway is refused (401
    /// event_time_in_future): times only move forward, so it would lock the user's state.
    @Test("an event_time after iat plus the leeway is refused, and Redis stays untouched")
    func eventTimeInTheFutureIsRefused() throws {
        let stack = try ServeStack()
        defer { stack.shutdown() }
        let now = Int64(Date().timeIntervalSince1970)
        let future = try stack.body(
            type: "consent-revoked", sub: "000038.l.0001", eventTimeMilliseconds: (now + 120) * 1000)
        let response = try stack.post(future)
        #expect(response.status == 401)
        #expect(response.jsonFields == ["status": "refused", "error": "event_time_in_future"])
        #expect(try stack.redisSnapshot() == [])
        // Within the leeway it is accepted (Apple's clocks differ by a little).
        let close = try stack.body(
            type: "consent-revoked", sub: "000038.l.0002", eventTimeMilliseconds: (now + 30) * 1000)
        #expect(try stack.post(close).bodyText == #"{"status":"applied"}"#)
    }
}
