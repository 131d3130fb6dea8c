import Foundation
import Glibc
import SIWARedis
import SIWASupport
import Synchronization
import Testing

/// A name server on a loopback UDP port: it answers every `A` question with 127.0.0.1, names
/// under `missing.` with NXDOMAIN and `AAAA` with no address, or (`silent`) reads every
/// question and never answers, like a resolver that hangs. Counts the questions it read.
final class LoopbackNameServer: @unchecked Sendable {
    let port: Int
    private let descriptor: Int32
    private let silent: Bool
    private let questionsRead = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)
    private let finished = Latch()

    var questions: Int { questionsRead.load(ordering: .acquiring) }

    init(silent: Bool) throws {
        self.silent = silent
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EIO) }
        self.descriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        guard bound else {
            close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        // Each read waits at most 100 ms, so a stop is seen within that.
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        Thread { [self] in serve() }.start()
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
        _ = finished.wait(until: .now + .seconds(5))
        close(descriptor)
    }

    private func serve() {
        defer { finished.open() }
        // Bounded: a test that forgot to stop it ends it within a minute.
        let deadline = ContinuousClock.now + .seconds(60)
        var buffer = [UInt8](repeating: 0, count: 1500)
        while !stopped.load(ordering: .acquiring) && ContinuousClock.now < deadline {
            var peer = sockaddr_storage()
            var peerLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let count = withUnsafeMutablePointer(to: &peer) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    recvfrom(descriptor, &buffer, buffer.count, 0, $0, &peerLength)
                }
            }
            guard count > 12 else { continue }
            questionsRead.add(1, ordering: .releasing)
            guard !silent, let answer = Self.answer(to: Array(buffer[..<count])) else { continue }
            _ = withUnsafePointer(to: &peer) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(descriptor, answer, answer.count, 0, $0, peerLength)
                }
            }
        }
    }

    /// The reply to one query: its id and question, then the answer (RFC 1035, 4.1).
    static func answer(to query: [UInt8]) -> [UInt8]? {
        var index = 12
        var labels: [String] = []
        while index < query.count, query[index] != 0 {
            let length = Int(query[index])
            guard index + 1 + length < query.count else { return nil }
            labels.append(String(decoding: query[(index + 1)...(index + length)], as: UTF8.self))
            index += 1 + length
        }
        guard index + 5 <= query.count else { return nil }
        let question = Array(query[12..<(index + 5)])
        let type = UInt16(query[index + 1]) << 8 | UInt16(query[index + 2])
        let missing = labels.first == "missing"
        let answers = type == 1 && !missing ? 1 : 0
        // Flags: a response, recursion desired and available; NXDOMAIN (3) or no error.
        var reply: [UInt8] = [query[0], query[1], 0x81, missing ? 0x83 : 0x80, 0, 1, 0, UInt8(answers), 0, 0, 0, 0]
        reply += question
        if answers == 1 {
            // The question's name (a pointer to offset 12), A, IN, a TTL of 60 s, 127.0.0.1.
            reply += [0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]
        }
        return reply
    }
}

/// Redis host names are resolved within the connect timeout (c-ares), from the system's
/// configuration or a name server a test names: a resolver that never answers costs a
/// connection its connect timeout, not the resolver's own 5 s per try.
@Suite("Redis host names resolved within the connect timeout", .serialized)
struct RedisHostResolverTests {
    static func endpoint(_ host: String, port: Int, nameServer: LoopbackNameServer) -> RedisEndpoint {
        var endpoint = RedisEndpoint(address: .tcp(host: host, port: port))
        endpoint.resolver = RedisHostResolver(nameServers: [RedisNodeAddress(host: "127.0.0.1", port: nameServer.port)])
        return endpoint
    }

    @Test("a name server that never answers: the command fails with timed_out at the connect timeout")
    func silentNameServer() throws {
        let nameServer = try LoopbackNameServer(silent: true)
        defer { nameServer.stop() }
        let connection = RedisConnection(
            endpoint: Self.endpoint("redis.siwa-test.example", port: 6379, nameServer: nameServer),
            connectTimeout: .milliseconds(500), commandTimeout: .seconds(1))
        let started = ContinuousClock.now
        #expect {
            try connection.command("PING")
        } throws: { error in
            let error = error as? RedisError
            return error?.code == .timedOut && error?.message.contains("resolving redis.siwa-test.example") == true
        }
        let elapsed = ContinuousClock.now - started
        // The resolver's own period is 5 s per try (resolv.conf's default): the deadline cut it
        // short (under 4 s leaves a loaded machine room and still tells the two apart).
        #expect(elapsed >= .milliseconds(450) && elapsed < .milliseconds(4000), "took \(elapsed)")
        // The name server counts on its own thread: wait for it to have read the question.
        #expect(waitUntil(timeout: 5) { nameServer.questions >= 1 }, "the question never reached the name server")
    }

    @Test("a name server that answers: the connection is made to the address it gave")
    func answeringNameServer() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let nameServer = try LoopbackNameServer(silent: false)
        defer { nameServer.stop() }
        let connection = RedisConnection(
            endpoint: Self.endpoint("redis.siwa-test.example", port: server.port, nameServer: nameServer),
            connectTimeout: .seconds(2), commandTimeout: .seconds(2))
        #expect(try connection.command("PING").string == "PONG")
        #expect(nameServer.questions >= 1)
    }

    @Test("a name that does not exist: connection_failed naming the name, at once")
    func missingName() throws {
        let nameServer = try LoopbackNameServer(silent: false)
        defer { nameServer.stop() }
        let connection = RedisConnection(
            endpoint: Self.endpoint("missing.siwa-test.example", port: 6379, nameServer: nameServer),
            connectTimeout: .seconds(5), commandTimeout: .seconds(1))
        let started = ContinuousClock.now
        #expect {
            try connection.command("PING")
        } throws: { error in
            let error = error as? RedisError
            return error?.code == .connectionFailed
                && error?.message.contains("cannot resolve missing.siwa-test.example") == true
        }
        #expect(ContinuousClock.now - started < .seconds(2))
    }

    @Test("an IP literal asks no name server")
    func literalAsksNoNameServer() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let nameServer = try LoopbackNameServer(silent: true)
        defer { nameServer.stop() }
        let connection = RedisConnection(
            endpoint: Self.endpoint("127.0.0.1", port: server.port, nameServer: nameServer),
            connectTimeout: .seconds(2), commandTimeout: .seconds(2))
        #expect(try connection.command("PING").string == "PONG")
        #expect(nameServer.questions == 0)
    }
}
