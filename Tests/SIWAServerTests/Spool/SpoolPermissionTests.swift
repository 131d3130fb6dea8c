import Foundation
import SIWASpool
import SIWAVerification
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("SpoolPermission")
struct SpoolPermissionTests {
    @Test func theDirectoryIsPrivateAndEveryFileOwnerOnly() throws {
        try withSpoolDirectory { parent in
            let directory = parent + "/spool"
            let spool = try NotificationSpool(directory: directory)
            #expect(try permissions(directory) == 0o700)
            try spool.append(spoolNotification(2))  // an email event: the file holds an address
            let segment = try onlyNonEmptySegment(directory)
            #expect(try permissions(segment) == 0o600)
            _ = spool.replay { _ in }
            #expect(try permissions(directory + "/replay-position") == 0o600)
        }
    }

    @Test func anExistingWiderDirectoryIsNarrowedTo0700() throws {
        try withSpoolDirectory { directory in
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory)
            _ = try NotificationSpool(directory: directory)
            #expect(try permissions(directory) == 0o700)
        }
    }

    @Test func aPathThatIsAFileIsRefused() throws {
        try withSpoolDirectory { parent in
            let path = parent + "/not-a-directory"
            try writeBytes([], to: path)
            let error = #expect(throws: SpoolError.self) { _ = try NotificationSpool(directory: path) }
            #expect(error?.code == .directoryUnusable)
        }
    }

    @Test func theSystemErrorIsKeptByName() throws {
        try withSpoolDirectory { parent in
            let file = parent + "/a-file"
            try writeBytes([], to: file)
            let error = #expect(throws: SpoolError.self) { _ = try NotificationSpool(directory: file + "/spool") }
            #expect(error?.code == .directoryUnusable)
            #expect(error?.errorNumber == ENOTDIR)
            #expect(error?.errnoName == "ENOTDIR")
            #expect(error?.logFields.map(\.0) == ["error", "errno"])
        }
    }

    @Test func appendingIntoAReadOnlyDirectoryFailsWithASpoolError() throws {
        try withSpoolDirectory { directory in
            let spool = try NotificationSpool(directory: directory)
            try spool.append(spoolNotification(1))
            // Replay seals the segment, so the next append must create a file in the directory.
            #expect(spool.replay { _ in }.taken == 1)

            try makeReadOnly(directory)
            defer { try? makeWritable(directory) }

            let error = #expect(throws: SpoolError.self) { try spool.append(spoolNotification(2)) }
            #expect(error?.code == .openFailed)
            // Immutable (root) or mode 0500: the system's own answer is kept.
            #expect(error?.errnoName == (geteuid() == 0 ? "EPERM" : "EACCES"))
            #expect(spool.depth == 0)
            // A start on a read-only directory fails at once instead of at the first outage.
            let startError = #expect(throws: SpoolError.self) { _ = try NotificationSpool(directory: directory) }
            #expect(startError?.code == .openFailed)

            // Writable again: appends work again.
            try makeWritable(directory)
            try spool.append(spoolNotification(3))
            #expect(spool.depth == 1)
        }
    }

    /// Mode 0500; as root, permission bits do not bind, so the directory is also made
    /// immutable with chattr (ext4 and CAP_LINUX_IMMUTABLE).
    private func makeReadOnly(_ directory: String) throws {
        try FileManager.default.setAttributes([.posixPermissions: 0o500], ofItemAtPath: directory)
        if geteuid() == 0 { try #require(runChattr("+i", directory), "cannot make the directory read-only as root") }
    }

    private func makeWritable(_ directory: String) throws {
        if geteuid() == 0 { _ = runChattr("-i", directory) }
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory)
    }

    private func runChattr(_ flag: String, _ path: String) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
        process.arguments = [flag, path]
        do { try process.run() } catch { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
}
