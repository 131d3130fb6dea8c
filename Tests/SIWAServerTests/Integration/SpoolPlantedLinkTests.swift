import Foundation
import Glibc
import SIWAJSON
import Testing

@testable import SIWASpool

/// The operator's spool commands run as root on a directory the service user can write.
/// What that user plants there (a link under a torn file's or a record's name, naming a
/// private key; a FIFO) is never followed, opened or waited on: `lstat` when listing,
/// `O_NOFOLLOW` and regular files only on every open. And `requeue ID` and `discard ID`
/// take the lock on `rejected/` that serve's scrub and retention take; `discard` keeps an
/// audit line in the spool.
@Suite("spool commands: planted links and FIFOs, the rejected/ lock, the discard audit", .serialized)
struct SpoolPlantedLinkTests {
    static let keyText = "-----BEGIN PRIVATE KEY-----\nMIIEplantedkeymaterial\n-----END PRIVATE KEY-----\n"

    /// A root-only file standing in for a private key, in a root-only directory.
    static func privateKey(in directory: String) throws -> String {
        let keys = directory + "-keys"
        try FileManager.default.createDirectory(
            atPath: keys, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let key = keys + "/server.key"
        #expect(
            FileManager.default.createFile(
                atPath: key, contents: Data(keyText.utf8), attributes: [.posixPermissions: 0o600]))
        return key
    }

    func spool(_ directory: String, _ words: [String]) throws -> CommandRun {
        try CommandRun.endpoint(
            ["spool"] + words + ["--spool-dir", directory], environment: [:], timeout: .seconds(30))
    }

    @Test("list, show, status, requeue and discard never follow a planted link nor wait on a FIFO")
    func plantedLinksAndFIFOs() throws {
        try withSpoolDirectory { directory in
            let key = try Self.privateKey(in: directory)
            defer { try? FileManager.default.removeItem(atPath: directory + "-keys") }
            let rejected = directory + "/rejected"
            try FileManager.default.createDirectory(atPath: rejected, withIntermediateDirectories: false)
            // One genuine torn file, so listing still works around the plants.
            #expect(
                FileManager.default.createFile(
                    atPath: directory + "/segment-0000000000000007.torn", contents: Data(#"{"v":2,"sub":"x"#.utf8)))
            try FileManager.default.createSymbolicLink(
                atPath: directory + "/segment-0000000000000009.torn", withDestinationPath: key)
            #expect(mkfifo(directory + "/segment-0000000000000008.torn", 0o666) == 0)
            try FileManager.default.createSymbolicLink(
                atPath: rejected + "/record-0001700000000000-7-1-wrongtype.log", withDestinationPath: key)
            #expect(mkfifo(rejected + "/record-0001700000000001-7-2-wrongtype.log", 0o666) == 0)
            let keyBefore = try FileManager.default.attributesOfItem(atPath: key)

            let list = try spool(directory, ["list"])
            #expect(list.status == 0 && !list.timedOut, "\(list.errors)")
            #expect(!list.output.contains("PRIVATE KEY") && !list.output.contains("plantedkeymaterial"))
            #expect(ReconcileTests().logLines(list.output).map { $0["id"] ?? "" } == ["torn-0000000000000007"])

            for id in ["torn-0000000000000009", "torn-0000000000000008", "record-0001700000000000-7-1-wrongtype"] {
                let show = try spool(directory, ["show", id, "--show-address"])
                #expect(show.status == 1 && !show.timedOut, "\(id): \(show.output)")
                #expect(show.errors.contains("no set-aside or torn record with that ID"))
                #expect(!(show.output + show.errors).contains("plantedkeymaterial"))
                let discard = try spool(directory, ["discard", id, "--reason", "planted"])
                #expect(discard.status == 1 && !discard.timedOut)
            }
            let status = try SpoolDeadEndTests.spoolStatus(directory)
            #expect(status["torn_files"] == "1" && status["rejected"] == "0")
            let requeue = try spool(directory, ["requeue"])
            #expect(requeue.status == 0 && requeue.output.contains(#""files":0"#))
            // Nothing moved, nothing deleted, the key untouched.
            #expect(
                try FileManager.default.destinationOfSymbolicLink(
                    atPath: rejected + "/record-0001700000000000-7-1-wrongtype.log") == key)
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: directory).sorted() == [
                    "rejected", "segment-0000000000000007.torn", "segment-0000000000000008.torn",
                    "segment-0000000000000009.torn",
                ])
            #expect(try String(contentsOfFile: key, encoding: .utf8) == Self.keyText)
            let keyAfter = try FileManager.default.attributesOfItem(atPath: key)
            #expect(keyAfter[.modificationDate] as? Date == keyBefore[.modificationDate] as? Date)
        }
    }

    /// Between the listing's lstat and the open, a name can be swapped for a link: the open
    /// itself refuses it, with its own error.
    @Test("a file swapped for a link after listing: the open refuses it, spool_file_not_regular")
    func swappedAfterListing() throws {
        try withSpoolDirectory { directory in
            let key = try Self.privateKey(in: directory)
            defer { try? FileManager.default.removeItem(atPath: directory + "-keys") }
            let torn = directory + "/segment-0000000000000009.torn"
            #expect(FileManager.default.createFile(atPath: torn, contents: Data("torn bytes".utf8)))
            let record = try #require(try SpoolInspector.record(spoolDirectory: directory, id: "torn-0000000000000009"))
            try FileManager.default.removeItem(atPath: torn)
            try FileManager.default.createSymbolicLink(atPath: torn, withDestinationPath: key)
            #expect(throws: SpoolError(.notRegularFile, "")) {
                _ = try SpoolInspector.tornText(record, showAddress: true)
            }
            try FileManager.default.removeItem(atPath: torn)
            #expect(mkfifo(torn, 0o666) == 0)
            #expect(throws: SpoolError(.notRegularFile, "")) {
                _ = try SpoolInspector.tornText(record, showAddress: true)
            }
            #expect(throws: SpoolError(.notRegularFile, "")) {
                _ = try SpoolFileSystem.read(torn, code: .readFailed)
            }
        }
    }

    /// `requeue ID` and `discard ID` wait for the lock on rejected/ (held here as serve's
    /// scrub holds it), and change nothing when it is not released in time.
    @Test("requeue ID and discard ID take the rejected/ lock; held by another, nothing changes")
    func oneRecordTakesTheLock() throws {
        try withSpoolDirectory { directory in
            let rejected = directory + "/rejected"
            try FileManager.default.createDirectory(atPath: rejected, withIntermediateDirectories: false)
            let names = ["record-0001700000000000-7-1-wrongtype.log", "record-0001700000001000-7-2-wrongtype.log"]
            for (index, name) in names.enumerated() {
                #expect(
                    FileManager.default.createFile(
                        atPath: rejected + "/" + name,
                        contents: Data(SpoolRecord.encode(spoolNotification(index + 1)))))
            }
            let ids = names.map { String($0.dropLast(".log".count)) }
            let holder = open(rejected, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            try #require(holder >= 0)
            #expect(flock(holder, LOCK_EX) == 0)
            #expect(throws: SpoolError(.setAsideBusy, "")) {
                _ = try SpoolInspector.requeue(spoolDirectory: directory, id: ids[0], lockWait: .milliseconds(50))
            }
            #expect(throws: SpoolError(.setAsideBusy, "")) {
                _ = try SpoolInspector.discard(spoolDirectory: directory, id: ids[1], lockWait: .milliseconds(50))
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: rejected).sorted() == names)
            close(holder)
            #expect(
                try SpoolInspector.requeue(spoolDirectory: directory, id: ids[0], lockWait: .milliseconds(50))
                    != .notFound)
            #expect(
                try SpoolInspector.discard(spoolDirectory: directory, id: ids[1], lockWait: .milliseconds(50))
                    != .notFound)
            #expect(try FileManager.default.contentsOfDirectory(atPath: rejected).isEmpty)
        }
    }

    /// The discard's audit: the same JSON line as on standard error, appended to the spool's
    /// audit.jsonl (0600), with what was lost, why and who; never the address or the sub.
    @Test("discard leaves an audit line in the spool: id, type, reason, user; no address, no sub")
    func discardIsAudited() throws {
        try withSpoolDirectory { directory in
            let rejected = directory + "/rejected"
            try FileManager.default.createDirectory(atPath: rejected, withIntermediateDirectories: false)
            let notification = spoolNotification(2)
            let address = try #require(notification.email)
            let name = "record-0001700000000000-7-1-wrongtype.log"
            #expect(
                FileManager.default.createFile(
                    atPath: rejected + "/" + name, contents: Data(SpoolRecord.encode(notification))))
            let audit = directory + "/" + SpoolInspector.auditFileName
            // A planted link where the audit file goes is not written through.
            let decoy = directory + "-decoy"
            #expect(FileManager.default.createFile(atPath: decoy, contents: Data()))
            defer { try? FileManager.default.removeItem(atPath: decoy) }
            try FileManager.default.createSymbolicLink(atPath: audit, withDestinationPath: decoy)
            let refused = try spool(directory, ["discard", "record-0001700000000000-7-1-wrongtype", "--reason", "x"])
            #expect(refused.status == 1 && refused.errors.contains("spool_file_not_regular"))
            #expect(try Data(contentsOf: URL(fileURLWithPath: decoy)).isEmpty)
            #expect(FileManager.default.fileExists(atPath: rejected + "/" + name), "nothing discarded unrecorded")
            try FileManager.default.removeItem(atPath: audit)

            let discarded = try spool(
                directory, ["discard", "record-0001700000000000-7-1-wrongtype", "--reason", "test data, by hand"])
            #expect(discarded.status == 0, "\(discarded.errors)")
            let text = try String(contentsOfFile: audit, encoding: .utf8)
            let lines = ReconcileTests().logLines(text)
            try #require(lines.count == 1)
            #expect(lines[0]["event"] == "spool_record_discarded")
            #expect(lines[0]["id"] == "record-0001700000000000-7-1-wrongtype")
            #expect(lines[0]["type"] == notification.type.name && lines[0]["reason"] == "test data, by hand")
            #expect(lines[0]["user"] == getpwuid(geteuid()).map { String(cString: $0.pointee.pw_name) })
            #expect(lines[0]["uid"] == String(getuid()))
            #expect(!text.contains(address) && !text.contains(notification.subject.prefix(6)))
            #expect(discarded.errors.contains(text.trimmingCharacters(in: .newlines)))
            let mode = try FileManager.default.attributesOfItem(atPath: audit)[.posixPermissions] as? Int
            #expect(mode == 0o600)
        }
    }
}
