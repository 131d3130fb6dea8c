import Foundation
import Glibc
import SIWAFastCGIClient
import Synchronization
import Testing

/// "fsync'd before the 200 `spooled`", proven on the real binary by fault injection:
/// strace shows the order of the system calls, and a preloaded shim makes `fsync` fail.
/// (The crash tests copy the page cache, so a missing fsync would be invisible to them.)
@Suite("Spool durability, proven with strace and a failing fsync", .serialized)
struct SpoolDurabilityProofTests {
    @Test("the spool file is fsync'd (and its directory) before the 200 spooled is written")
    func fsyncBeforeTheAnswer() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "siwa-strace-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let tracePath = directory.appendingPathComponent("trace.txt").path
        let strace = "/usr/bin/strace"
        try #require(
            FileManager.default.isExecutableFile(atPath: strace), "strace is needed (scripts/install-deps installs it)")
        // The shim (below) makes one append fail, so the next record goes to a segment
        // created mid-run: both the file made at start and one made by an append are checked.
        let shim = try Self.compileFsyncShim(in: directory)
        let flag = directory.appendingPathComponent("fail-fsync-now").path
        let stack = try ServeStack(
            extraEnvironment: [
                "LD_PRELOAD": shim, "SIWA_TEST_FSYNC_EIO_FLAG": flag, "SIWA_TEST_FSYNC_EIO_PATH_PART": "/spool",
            ],
            launcher: [
                strace, "-f", "-y", "-s", "256", "-e", "trace=fsync,fdatasync,write,openat", "-o", tracePath, "--",
            ])
        defer { stack.shutdown() }
        // A second start: the spool's directories exist, so no directory creation fsyncs the
        // spool directory by the way; only the fsync made for the new segment can.
        try Self.stopTraced(stack)
        try stack.startServe()
        stack.redis.kill()
        let first = try stack.post(try stack.body(type: "consent-revoked", sub: "000021.a.0001"))
        #expect(first.bodyText == #"{"status":"spooled"}"#)
        _ = FileManager.default.createFile(atPath: flag, contents: nil)
        #expect(try stack.post(try stack.body(type: "consent-revoked", sub: "000021.a.0002")).status == 503)
        try FileManager.default.removeItem(atPath: flag)
        let third = try stack.post(try stack.body(type: "consent-revoked", sub: "000021.a.0003"))
        #expect(third.bodyText == #"{"status":"spooled"}"#)

        try Self.stopTraced(stack)
        let lines = try String(contentsOfFile: tracePath, encoding: .utf8).split(separator: "\n").map(String.init)

        // The answers: writes on the FastCGI connection carrying a spooled answer.
        let answers = lines.indices.filter {
            lines[$0].contains(" write(") && lines[$0].contains("<socket:") && lines[$0].contains("Status: 200")
                && lines[$0].contains(#"\"spooled\""#)
        }
        try #require(answers.count == 2, "two spooled answers in the trace, found \(answers.count)")
        Self.expectDurable(lines, sub: "000021.a.0001", answeredAt: answers[0], spool: stack.spoolDirectory)
        Self.expectDurable(lines, sub: "000021.a.0003", answeredAt: answers[1], spool: stack.spoolDirectory)
    }

    /// Stops serve itself with SIGTERM (strace is its parent: killing strace would leave serve
    /// running untraced), and waits for strace to exit, so the trace is complete.
    static func stopTraced(_ stack: ServeStack) throws {
        let tracer = try #require(stack.serve?.process.processIdentifier)
        let serve = try #require(children(of: tracer).first, "strace has no child")
        kill(serve, SIGTERM)
        try #require(stack.serve?.waitForExit(timeout: 20) != nil, "strace did not exit after serve")
    }

    /// Before the answer on line `answer`: the record is written to a file in the spool, that
    /// file is fsync'd successfully on the same thread, and the directory is fsync'd after the
    /// file was created (so its name survives a crash too).
    static func expectDurable(_ lines: [String], sub: String, answeredAt answer: Int, spool: String) {
        let thread = threadID(lines[answer])
        let before = lines[..<answer]
        // strace reports each thread's calls in order, and a thread is blocked in fsync until
        // it returns: a call on the worker's thread before its answer finished before it.
        guard
            let recordWrite = before.lastIndex(where: {
                threadID($0) == thread && $0.contains(" write(") && $0.contains("<\(spool)/") && $0.contains(sub)
            })
        else {
            Issue.record("\(sub): the record is not written to the spool before the answer")
            return
        }
        let fileSync = before[recordWrite...].firstIndex {
            threadID($0) == thread && isSync($0) && $0.contains("<\(spool)/")
        }
        #expect(fileSync != nil, "\(sub): the spool file is not fsync'd between the record's write and the answer")
        if let fileSync { #expect(succeeded(lines, from: fileSync), "\(lines[fileSync])") }
        guard let file = pathOfDescriptor(in: lines[recordWrite]),
            let creation = before.lastIndex(where: {
                $0.contains(" openat(") && $0.contains("\"\(file)\"") && $0.contains("O_CREAT")
            })
        else {
            Issue.record("\(sub): the spool file's creation is not in the trace")
            return
        }
        let directorySync = before[creation...].firstIndex { isSync($0) && $0.contains("<\(spool)>") }
        #expect(
            directorySync != nil,
            "\(sub): the spool directory is not fsync'd between the file's creation and the answer")
    }

    @Test("fsync failing with EIO: 503 store_unavailable, and no partial record remains to be replayed")
    func fsyncFailure() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-eio-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let shim = try Self.compileFsyncShim(in: directory)
        let flag = directory.appendingPathComponent("fail-fsync-now").path
        // The shim fails fsync and fdatasync with EIO for paths containing "/spool" (the
        // spool directory and its files, never the JWKS cache beside it), and only while the
        // flag file exists, so serve starts normally.
        let live = try ServeStack(extraEnvironment: [
            "LD_PRELOAD": shim, "SIWA_TEST_FSYNC_EIO_FLAG": flag, "SIWA_TEST_FSYNC_EIO_PATH_PART": "/spool",
        ])
        defer { live.shutdown() }
        live.redis.kill()

        let first = try live.post(try live.body(type: "consent-revoked", sub: "000022.b.0001"))
        #expect(first.bodyText == #"{"status":"spooled"}"#)
        let bytesBefore = try Self.spoolBytes(live.spoolDirectory)

        _ = FileManager.default.createFile(atPath: flag, contents: nil)
        let failed = try live.post(try live.body(type: "consent-revoked", sub: "000022.b.0002"))
        #expect(failed.status == 503)
        #expect(failed.jsonFields == ["status": "unavailable", "error": "store_unavailable"])
        #expect(failed.header("Retry-After") == "30")
        #expect(live.serve?.logLines(event: "spool_append_failed").count == 1)
        // Several at once while fsync fails: appends share an fsync (group commit), and a
        // failed one must fail and cut every record it was to cover, never answer 200.
        let concurrent = try (4...9).map {
            try live.body(type: "consent-revoked", sub: String(format: "000022.b.%04d", $0))
        }
        let socketPath = live.socketPath
        let statuses = Mutex<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: concurrent.count) { index in
            let params = FastCGIClient.params(
                method: "POST", uri: "/apple/notifications", body: concurrent[index],
                contentType: "application/json")
            let response = try? FastCGIClient(.unixSocket(socketPath), timeout: .seconds(20))
                .send(params: params, body: concurrent[index])
            statuses.withLock { $0.append(response?.status ?? -1) }
        }
        #expect(statuses.withLock { $0 } == Array(repeating: 503, count: concurrent.count))
        try FileManager.default.removeItem(atPath: flag)
        // The record whose fsync failed was taken back: the spool holds what it held before.
        #expect(try Self.spoolBytes(live.spoolDirectory) == bytesBefore)
        #expect(try live.request("GET", "/healthz").jsonFields["spool_depth"] == "1")

        let third = try live.post(try live.body(type: "consent-revoked", sub: "000022.b.0003"))
        #expect(third.bodyText == #"{"status":"spooled"}"#)
        try live.redis.start()
        // Replay runs in order: once the third record is in, the second would be too.
        #expect(
            try live.waitUntil(timeout: 20) { try live.userHash(sub: "000022.b.0003")["consent_revoked_at"] != nil })
        #expect(try live.userHash(sub: "000022.b.0001")["consent_revoked_at"] != nil)
        #expect(try live.userHash(sub: "000022.b.0002") == [:])
        #expect(try live.streamLength() == 2)
        #expect(
            try live.waitUntil(timeout: 10) { try live.request("GET", "/healthz").jsonFields["spool_depth"] == "0" })
    }

    /// Every regular file in the spool (not `rejected/`) and its size.
    static func spoolBytes(_ directory: String) throws -> [String: Int] {
        var sizes: [String: Int] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            let attributes = try FileManager.default.attributesOfItem(atPath: directory + "/" + name)
            if attributes[.type] as? FileAttributeType == .typeRegular {
                sizes[name] = (attributes[.size] as? NSNumber)?.intValue ?? -1
            }
        }
        return sizes
    }

    static let fsyncShimSource = """
        /* Test fixture: fsync and fdatasync fail with EIO for files whose path contains a
           given part, while a flag file exists. Loaded into serve with LD_PRELOAD. */
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <errno.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>

        static int should_fail(int fd) {
            const char *flag = getenv("SIWA_TEST_FSYNC_EIO_FLAG");
            const char *part = getenv("SIWA_TEST_FSYNC_EIO_PATH_PART");
            if (flag == NULL || part == NULL || access(flag, F_OK) != 0) return 0;
            char link[64], target[4096];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t length = readlink(link, target, sizeof target - 1);
            if (length < 0) return 0;
            target[length] = 0;
            return strstr(target, part) != NULL;
        }

        int fsync(int fd) {
            if (should_fail(fd)) { errno = EIO; return -1; }
            int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
            return real(fd);
        }

        int fdatasync(int fd) {
            if (should_fail(fd)) { errno = EIO; return -1; }
            int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
            return real(fd);
        }
        """

    /// Compiles the shim with the system C compiler; returns the shared object's path.
    static func compileFsyncShim(in directory: URL) throws -> String {
        let source = directory.appendingPathComponent("fsync-eio.c").path
        let object = directory.appendingPathComponent("fsync-eio.so").path
        try fsyncShimSource.write(toFile: source, atomically: true, encoding: .utf8)
        let compiler = Process()
        compiler.executableURL = URL(fileURLWithPath: "/usr/bin/cc")
        compiler.arguments = ["-shared", "-fPIC", "-O1", "-o", object, source, "-ldl"]
        try compiler.run()
        compiler.waitUntilExit()
        try #require(compiler.terminationStatus == 0, "cc could not build the fsync shim")
        return object
    }

    /// The thread that made a traced call (strace -f prefixes each line with it).
    static func threadID(_ line: String) -> Substring { line.prefix { $0 != " " } }

    static func isSync(_ line: String) -> Bool { line.contains(" fsync(") || line.contains(" fdatasync(") }

    /// Whether the call traced on `index` returned 0 (on its own line, or when resumed).
    static func succeeded(_ lines: [String], from index: Int) -> Bool {
        let thread = threadID(lines[index])
        if !lines[index].contains("<unfinished ...>") { return lines[index].hasSuffix(" = 0") }
        return lines[(index + 1)...].first { threadID($0) == thread && $0.contains("resumed>") }?.hasSuffix(" = 0")
            ?? false
    }

    /// The path strace -y shows for the first descriptor argument: `write(9</path>, ...`.
    static func pathOfDescriptor(in line: String) -> String? {
        guard let open = line.range(of: "</"), let close = line[open.upperBound...].range(of: ">") else { return nil }
        return "/" + line[open.upperBound..<close.lowerBound]
    }

    /// The child processes of `pid` (strace's traced program).
    static func children(of pid: Int32) -> [Int32] {
        let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
        return text.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }
}
