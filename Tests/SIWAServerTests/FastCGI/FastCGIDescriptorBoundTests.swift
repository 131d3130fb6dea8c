import Foundation
import Glibc
import SIWAFastCGIClient
import SIWATestKit
import Testing

/// Connections that wait for a busy worker stay in the kernel's listen backlog, not in the
/// responder's descriptors, and running out of descriptors does not spin the acceptor. The
/// real `serve` binary (real Redis, the test JWKS host standing in for Apple's), its
/// descriptor limit lowered with prlimit(1), its descriptors and CPU time read from /proc.
@Suite("serve: waiting connections hold no descriptor, EMFILE does not spin", .serialized)
struct FastCGIDescriptorBoundTests {
    typealias Peer = FastCGIHostilePeerTests.Peer

    static func openDescriptors(_ pid: Int32) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count ?? -1
    }

    /// User plus system CPU seconds of the whole process.
    static func cpuSeconds(_ pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let fields = stat.split(separator: ")").last?.split(separator: " "), fields.count > 13
        else { return -1 }
        // After the command name: state is field 3, utime 14 and stime 15 (1-based).
        let ticks = (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The soft limit only: an unprivileged process cannot raise a hard limit again.
    /// Seconds the process's threads were running or waiting to run (on a CPU or in a run
    /// queue, from schedstat): a thread that spins counts all the time whatever the load,
    /// where its CPU time alone shrinks on a busy machine; a waiting one counts almost none.
    static func runnableSeconds(_ pid: Int32) -> Double {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.reduce(0.0) { total, task in
            let fields = ((try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/schedstat", encoding: .utf8)) ?? "")
                .split(separator: " ")
            guard fields.count >= 2 else { return total }
            return total + ((Double(fields[0]) ?? 0) + (Double(fields[1]) ?? 0)) / 1e9
        }
    }

    static func setDescriptorLimit(_ pid: Int32, _ limit: Int) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
        process.arguments = ["--pid", String(pid), "--nofile=\(limit):"]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "prlimit --nofile=\(limit):")
    }

    /// For `seconds`: the most descriptors seen open (sampled every 20 ms), the CPU
    /// seconds the process used, and the seconds its threads were runnable.
    static func watch(_ pid: Int32, seconds: Double) -> (mostDescriptors: Int, cpu: Double, runnable: Double) {
        let cpuBefore = cpuSeconds(pid)
        let runnableBefore = runnableSeconds(pid)
        var most = 0
        let end = ContinuousClock.now.advanced(by: .milliseconds(Int(seconds * 1000)))
        while ContinuousClock.now < end {
            most = max(most, openDescriptors(pid))
            usleep(20_000)
        }
        return (most, cpuSeconds(pid) - cpuBefore, runnableSeconds(pid) - runnableBefore)
    }

    @Test("both workers held, 300 requests waiting: descriptors stay bounded, no spin at the limit, all answered")
    func waitingRequestsStayInTheBacklog() throws {
        ServeBacklogTests.raiseDescriptorLimit()
        // Redis' command timeout far beyond the test: a worker waiting on a stopped Redis
        // stays held until it is continued.
        let stack = try ServeStack(extraEnvironment: ["SIWA_WORKERS": "2", "SIWA_REDIS_TIMEOUT_MS": "60000"])
        defer { stack.shutdown() }
        guard let serve = stack.serve else { throw ServeProcess.StartFailure(description: "no serve") }
        let pid = serve.process.processIdentifier
        #expect(try stack.health().status == 200)
        let baseline = Self.openDescriptors(pid)
        #expect(baseline > 0)
        // Two whole notifications take the two workers while Redis is stopped (SIGSTOP):
        // each worker waits on its Redis command. (A peer cannot hold a worker: only a
        // request that arrived whole reaches one.)
        stack.redis.send(SIGSTOP)
        var redisContinued = false
        defer { if !redisContinued { stack.redis.send(SIGCONT) } }
        var holders: [FastCGIClient.Connection] = []
        for index in 0..<2 {
            let body = try stack.body(type: "consent-revoked", sub: "000\(index).held.0001")
            var whole = FastCGIHostilePeerTests.requestHead(
                FastCGIClient.params(
                    method: "POST", uri: "/apple/notifications", body: body, contentType: "application/json"))
            whole += FastCGIHostilePeerTests.bodyRecords(body)
            FastCGIClient.appendRecord(&whole, type: 5, requestID: 1, content: [UInt8]())
            let holder = try FastCGIClient(.unixSocket(stack.socketPath), timeout: .seconds(90)).connect()
            try holder.writeAll(whole)
            holders.append(holder)
        }
        defer { holders.forEach { $0.close() } }
        // Held once a worker has read what they sent (bounded wait for that event; the
        // acceptor only peeks).
        let held = stack.waitUntil(timeout: 20) { holders.allSatisfy { $0.unreadByPeer == 0 } }
        #expect(held, "the workers took the holders' requests")

        // 300 whole requests arrive while no worker is free, and with four descriptors left.
        try Self.setDescriptorLimit(pid, Self.openDescriptors(pid) + 4)
        let (sockets, refused) = ServeBacklogTests.connectAll(stack.socketPath, count: 300)
        #expect(refused == 0)
        var request = FastCGIHostilePeerTests.requestHead(FastCGIClient.params(method: "GET", uri: "/no-such-path"))
        FastCGIClient.appendRecord(&request, type: 5, requestID: 1, content: [UInt8]())
        var waiting: [FastCGIClient.Connection] = []
        defer { waiting.forEach { $0.close() } }
        for fd in sockets {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
            let connection = FastCGIClient.Connection(fd: fd, timeout: .seconds(90))
            try connection.writeAll(request)
            waiting.append(connection)
        }

        // First, fewer descriptors left than the acceptor may hold: accept(2) soon fails
        // with EMFILE, and accepting pauses instead of retrying at once (before, it retried
        // in a loop: a core's worth of CPU). The CPU bounds are generous for a loaded
        // machine: waiting idle is near 0.
        let starved = Self.watch(pid, seconds: 3)
        #expect(starved.cpu < 0.6, "\(starved.cpu) s of CPU in 3 s at the descriptor limit")
        #expect(starved.runnable < 1.5, "runnable \(starved.runnable) s of 3 s at the descriptor limit")

        // Then descriptors to spare (64 above serve's own): the acceptor takes at most 16
        // whole requests (four per worker, at least 16) beside the two held; the rest wait in
        // the backlog. Before, all 300 were accepted until the limit was reached.
        try Self.setDescriptorLimit(pid, baseline + 64)
        let bounded = Self.watch(pid, seconds: 3)
        #expect(
            bounded.mostDescriptors <= baseline + 16 + 2 + 4, "\(bounded.mostDescriptors) open, \(baseline) at rest")
        #expect(bounded.cpu < 0.6, "\(bounded.cpu) s of CPU in 3 s while waiting")
        #expect(bounded.runnable < 1.5, "runnable \(bounded.runnable) s of 3 s while waiting")

        // Descriptors back, workers freed (Redis continues): every waiting request is
        // answered, none lost from the backlog.
        try Self.setDescriptorLimit(pid, 1024)
        stack.redis.send(SIGCONT)
        redisContinued = true
        var answered = 0
        for connection in waiting {
            let text = String(decoding: (try? connection.readToEnd()) ?? [], as: UTF8.self)
            if text.contains("Status: 404") { answered += 1 }
        }
        #expect(answered == 300)
    }
}
