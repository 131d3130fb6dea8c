import Foundation
import SIWAVerification
import Synchronization
import Testing

@testable import SIWASpool

#if canImport(Glibc)
    import Glibc
#endif

/// `rejected/` is changed by two processes: `serve` (the account-deleted scrub, the
/// retention sweep) and `spool requeue`. Each test puts the other side's change exactly
/// between the scrub's read of a file and its replacement, where the race lies.
@Suite("Set-aside files: the scrub against requeue and retention, and crash leftovers", .serialized)
struct SpoolSetAsideRaceTests {
    static let address = "relay-race@privaterelay.appleid.com"

    /// An email event of one user that carries their address.
    static func emailEvent(jti: String = "race-1") -> VerifiedNotification {
        VerifiedNotification(
            clientID: "com.example.app", subject: "000050.race.0001", type: .emailEnabled, rawType: "email-enabled",
            eventTimeMilliseconds: 1_796_000_000_000, tokenID: jti, issuedAt: 1_796_000_001,
            expiresAt: 1_796_086_401, email: address, isPrivateEmail: true)
    }

    /// What the hook saw happen, read after the scrub.
    final class Seen: Sendable {
        let events = Mutex<[String]>([])
        func add(_ event: String) { events.withLock { $0.append(event) } }
        var all: [String] { events.withLock { $0 } }
    }

    /// Every file under the spool directory (rejected/ included) and its text.
    static func files(_ spool: String) throws -> [String: String] {
        var found: [String: String] = [:]
        for directory in [spool, spool + "/rejected"] {
            for name in try FileManager.default.contentsOfDirectory(atPath: directory)
            where name != "rejected" && !name.hasPrefix(".") {
                found[directory == spool ? name : "rejected/" + name] = try String(
                    contentsOfFile: directory + "/" + name, encoding: .utf8)
            }
        }
        return found
    }

    @Test("a file moved away between the scrub's read and its rename is not re-created")
    func scrubDoesNotRecreateAMovedFile() throws {
        try withSpoolDirectory { spool in
            // A mover that takes no lock (an operator's mv, an earlier release's requeue).
            let store = try SpoolSetAsideStore(spoolDirectory: spool, clock: .system) { path in
                let name = String(path.split(separator: "/").last!)
                #expect(rename(path, spool + "/requeue-" + name) == 0)
            }
            let path = try store.add(Self.emailEvent())
            let name = String(path.split(separator: "/").last!)
            let before = try String(contentsOfFile: path, encoding: .utf8)

            #expect(try store.forgetEmail(clientID: "com.example.app", subject: "000050.race.0001") == 0)
            // One copy of the record, where the mover put it, as it was.
            #expect(try Self.files(spool) == ["requeue-" + name: before])
        }
    }

    @Test("spool requeue waits for the scrub: the record moves once, without its address")
    func requeueWaitsForTheScrub() throws {
        try withSpoolDirectory { spool in
            let seen = Seen()
            let store = try SpoolSetAsideStore(spoolDirectory: spool, clock: .system) { _ in
                do {
                    let moved = try SpoolInspector.requeue(spoolDirectory: spool, lockWait: .milliseconds(100))
                    seen.add("requeued \(moved.files)")
                } catch let error as SpoolError {
                    seen.add(error.code.rawValue)
                } catch {
                    seen.add("\(error)")
                }
            }
            try store.add(Self.emailEvent())

            #expect(try store.forgetEmail(clientID: "com.example.app", subject: "000050.race.0001") == 1)
            #expect(seen.all == ["spool_set_aside_busy"])
            #expect(try SpoolInspector.requeue(spoolDirectory: spool) == .init(files: 1, records: 1))
            let files = try Self.files(spool)
            #expect(files.count == 1, "\(files.keys.sorted())")
            let (name, text) = try #require(files.first)
            #expect(name.hasPrefix("requeue-record-"))
            #expect(text.contains(#""jti":"race-1""#))
            #expect(!text.contains("@"))
        }
    }

    @Test("the real spool requeue honours the lock: held by serve's side, it moves nothing and says so, exit 1")
    func requeueCommandHonoursTheLock() throws {
        try withSpoolDirectory { spool in
            let store = try SpoolSetAsideStore(spoolDirectory: spool)
            let path = try store.add(Self.emailEvent())
            let before = try Self.files(spool)
            let run = try SpoolFileSystem.withDirectoryLock(spool + "/rejected", wait: .seconds(1)) {
                () throws(SpoolError) -> CommandRun in
                do {
                    return try CommandRun.endpoint(["spool", "requeue", "--spool-dir", spool])
                } catch {
                    throw SpoolError(.readFailed, "\(error)")
                }
            }
            #expect(run.status == 1)
            #expect(run.output.isEmpty)
            #expect(run.errors.hasPrefix("siwa-endpoint spool requeue: spool_set_aside_busy"), "\(run.errors)")
            #expect(try Self.files(spool) == before)
            #expect(FileManager.default.fileExists(atPath: path))
            // Released, the same command moves it.
            let free = try CommandRun.endpoint(["spool", "requeue", "--spool-dir", spool])
            #expect(free.status == 0)
            #expect(free.output.contains(#""requeued":1,"files":1"#), "\(free.output)")
        }
    }

    @Test("the retention sweep waits for the scrub: a file it reports deleted does not come back")
    func retentionWaitsForTheScrub() throws {
        try withSpoolDirectory { spool in
            let seen = Seen()
            let store = try SpoolSetAsideStore(spoolDirectory: spool, clock: .system) { _ in
                // A year from now: every file is past the retention.
                let expired = SpoolInspector.expire(
                    spoolDirectory: spool, olderThanDays: 14, now: Int64(Date().timeIntervalSince1970) + 365 * 86_400,
                    lockWait: .milliseconds(100))
                seen.add("expired \(expired.count)")
            }
            let path = try store.add(Self.emailEvent())

            #expect(try store.forgetEmail(clientID: "com.example.app", subject: "000050.race.0001") == 1)
            #expect(seen.all == ["expired 0"])
            let text = try String(contentsOfFile: path, encoding: .utf8)
            #expect(text.contains(#""jti":"race-1""#))
            #expect(!text.contains("@"))
            #expect(try Self.files(spool).count == 1)
        }
    }

    @Test("the scrub keeps the file's modification time: the retention still counts from the setting aside")
    func scrubKeepsTheAge() throws {
        try withSpoolDirectory { spool in
            let store = try SpoolSetAsideStore(spoolDirectory: spool)
            let path = try store.add(Self.emailEvent())
            let tenDaysAgo = Date().addingTimeInterval(-10 * 86_400)
            try FileManager.default.setAttributes([.modificationDate: tenDaysAgo], ofItemAtPath: path)
            let before = try #require(SpoolFileSystem.status(path)?.modified)

            #expect(try store.forgetEmail(clientID: "com.example.app", subject: "000050.race.0001") == 1)
            #expect(try !String(contentsOfFile: path, encoding: .utf8).contains("@"))
            #expect(SpoolFileSystem.status(path)?.modified == before)
        }
    }

    @Test("crash leftovers in rejected/: a finished rewrite adopted, an unfinished one and a lone copy deleted")
    func leftoversAreSettledAtStart() throws {
        try withSpoolDirectory { spool in
            let rejected = spool + "/rejected"
            let first = try SpoolSetAsideStore(spoolDirectory: spool)
            #expect(first.leftovers.isEmpty)
            let scrubbed = try first.add(Self.emailEvent(jti: "race-2"))
            let unfinished = try first.add(Self.emailEvent(jti: "race-3"))
            let withAddress = try fileBytes(scrubbed)
            let withoutAddress = SpoolRecord.encode(
                SpoolSetAsideStore.withoutAddress(Self.emailEvent(jti: "race-2")),
                spooledAt: try #require(
                    SpoolSegmentReader(path: scrubbed, offset: 0).flatMap { reader -> Int64? in
                        guard case .record(_, let spooledAt, _, _) = try reader.next() else { return nil }
                        return spooledAt
                    }))
            // A rewrite finished but not renamed; one cut short; a record whose rename never came.
            try writeBytes(withoutAddress, to: scrubbed + ".tmp")
            try writeBytes(Array(withoutAddress.prefix(40)), to: unfinished + ".tmp")
            let lone = rejected + "/record-00000001796000000000-1-9.log.tmp"
            try writeBytes(Array(SpoolRecord.encode(Self.emailEvent(jti: "race-4"), spooledAt: 1).dropLast()), to: lone)
            let unfinishedBefore = try fileBytes(unfinished)

            let second = try SpoolSetAsideStore(spoolDirectory: spool)
            #expect(
                second.leftovers == [
                    SpoolLeftover(file: lone, action: .deleted),
                    SpoolLeftover(file: scrubbed + ".tmp", action: .adopted),
                    SpoolLeftover(file: unfinished + ".tmp", action: .deleted),
                ])
            #expect(try spoolFileNames(rejected).filter { $0.hasSuffix(".tmp") }.isEmpty)
            #expect(try fileBytes(scrubbed) == withoutAddress)
            #expect(try fileBytes(scrubbed) != withAddress)
            #expect(try fileBytes(unfinished) == unfinishedBefore)
            #expect(try spoolFileNames(rejected).count == 2)
        }
    }
}
