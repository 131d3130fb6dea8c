import Foundation
import Glibc
import SIWAKeys
import Synchronization
import Testing

@Suite("JWKS cache file")
struct JWKSCacheFileTests {
    @Test func storeThenLoadRoundTripsAndLeavesNoTemporaryFile() throws {
        let directory = try JWKSTestFixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = JWKSCacheFile(path: directory.appendingPathComponent("jwks.json").path)
        #expect(try file.load() == nil)
        let before = JWKSTestFixtures.wallClock
        try file.store(Array("first".utf8))
        try file.store(Array("second".utf8))
        let loaded = try #require(try file.load())
        #expect(loaded.bytes == Array("second".utf8))
        #expect(loaded.writtenAt >= before && loaded.writtenAt <= JWKSTestFixtures.wallClock)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["jwks.json"])
    }

    @Test func oversizedFileIsRefused() throws {
        let directory = try JWKSTestFixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = JWKSCacheFile(path: directory.appendingPathComponent("jwks.json").path, maximumBytes: 8)
        try file.store(Array("123456789".utf8))
        #expect(throws: JWKSCacheFileError.self) { try file.load() }
        do {
            _ = try file.load()
        } catch {
            #expect(error.code == .tooLarge)
        }
    }

    @Test func storeIntoAMissingDirectoryFails() throws {
        let directory = try JWKSTestFixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = JWKSCacheFile(path: directory.appendingPathComponent("absent/jwks.json").path)
        do {
            try file.store(Array("x".utf8))
            Issue.record("store into a missing directory succeeded")
        } catch {
            #expect(error.code == .writeFailed)
        }
    }

    @Test func unreadableFileIsAnErrorNotAMissingFile() throws {
        let directory = try JWKSTestFixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // A directory where the file should be: the open succeeds, and the provider must
        // not mistake it for "no cache yet".
        let path = directory.appendingPathComponent("jwks.json").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        do {
            _ = try JWKSCacheFile(path: path).load()
            Issue.record("loading a directory succeeded")
        } catch {
            #expect(error.code == .notRegularFile)
        }
    }

    @Test func aFIFOIsRefusedWithoutBlocking() throws {
        let directory = try JWKSTestFixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("jwks.json").path
        #expect(mkfifo(path, 0o600) == 0)
        // A blocking open of a FIFO waits for a writer: nobody writes, so a regression hangs
        // here, on a thread the test gives up on after 10 s.
        let outcome = Mutex<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            do {
                _ = try JWKSCacheFile(path: path).load()
                outcome.withLock { $0 = "loaded" }
            } catch {
                outcome.withLock { $0 = (error as? JWKSCacheFileError)?.code.rawValue ?? "\(error)" }
            }
            done.signal()
        }.start()
        #expect(done.wait(timeout: .now() + 10) == .success, "the load of a FIFO blocked")
        #expect(outcome.withLock { $0 } == "cache_not_regular_file")
    }

    @Test func aSymbolicLinkIsNotFollowed() throws {
        let directory = try JWKSTestFixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let target = directory.appendingPathComponent("elsewhere.json").path
        try Data("{}".utf8).write(to: URL(fileURLWithPath: target))
        let path = directory.appendingPathComponent("jwks.json").path
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
        do {
            _ = try JWKSCacheFile(path: path).load()
            Issue.record("loading through a symbolic link succeeded")
        } catch {
            #expect(error.code == .notRegularFile)
        }
    }
}
