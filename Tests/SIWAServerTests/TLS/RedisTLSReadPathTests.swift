import Foundation
import Glibc
import SIWARedis
import SIWATLS
import Testing

/// The TLS read and write paths against a real TLS-only `redis-server`, counted in system
/// calls of the test's own thread (`/proc/thread-self/io`: `syscr`, `syscw`), since the
/// connection runs its commands on the calling thread: what TLS costs beside plain TCP is
/// mostly how many reads and writes each command takes.
@Suite("Redis over TLS: reads, writes and reconnects", .serialized)
struct RedisTLSReadPathTests {
    @Test(
        "over TLS one write(2) and one read(2) per small command: the reply is read ahead whole, not header then body")
    func oneReadAndOneWritePerCommand() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let server = try RedisServerProcess(tls: fixture.goodServer)
        defer { server.shutdown() }
        var endpoint = try RedisEndpoint(parsing: server.url())
        endpoint.tls = fixture.clientTLS
        let connection = RedisConnection(endpoint: endpoint)
        // Connects, makes the handshake and takes the server's session tickets.
        #expect(try connection.command("PING") == .status("PONG"))
        let commands = 100
        let before = try ThreadSystemCalls.now()
        for index in 0..<commands {
            #expect(try connection.command("SET", "key-\(index)", "value-\(index)") == .status("OK"))
        }
        let after = try ThreadSystemCalls.now()
        #expect(after.since(before).writes == commands)
        #expect(after.since(before).reads == commands)
        #expect(try server.unixSocketConnection().command("DBSIZE").integer == Int64(commands))
        #expect(try server.unixSocketConnection().command("GET", "key-99") == .bulkString(Array("value-99".utf8)))
    }

    @Test(
        "replies that arrived together in TLS records are read from OpenSSL's buffer: one read(2) for three, none waited for"
    )
    func recordsAlreadyBufferedAreRead() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let server = try RedisServerProcess(tls: fixture.goodServer)
        defer { server.shutdown() }
        var endpoint = try RedisEndpoint(parsing: server.url())
        endpoint.tls = fixture.clientTLS
        let subscriber = RedisConnection(
            endpoint: endpoint, connectTimeout: .seconds(5), commandTimeout: .seconds(5))
        #expect(
            try subscriber.command("SUBSCRIBE", "news")
                == .array([.bulkString(Array("subscribe".utf8)), .bulkString(Array("news".utf8)), .integer(1)]))
        let publisher = server.unixSocketConnection()
        // Three PUBLISH commands, so three separate writes of the server, three TLS records;
        // the PING after them is answered only after the server wrote the third message.
        for number in 1...3 {
            #expect(try publisher.command("PUBLISH", "news", "message-\(number)") == .integer(1))
        }
        #expect(try publisher.command("PING") == .status("PONG"))
        let before = try ThreadSystemCalls.now()
        var received: [RedisReply] = []
        for _ in 1...3 { received.append(try subscriber.nextPushedReply()) }
        let after = try ThreadSystemCalls.now()
        #expect(
            received
                == (1...3).map { number in
                    .array([
                        .bulkString(Array("message".utf8)), .bulkString(Array("news".utf8)),
                        .bulkString(Array("message-\(number)".utf8)),
                    ])
                })
        #expect(after.since(before).reads == 1)
    }
}

extension RedisTLSReadPathTests {
    @Test(
        "a reconnect resumes the TLS session the server gave; a restarted server with a certificate from another CA is still refused"
    )
    func reconnectResumesTheSession() throws {
        let fixture = try RedisTLSFixture()
        defer { fixture.remove() }
        let server = try RedisServerProcess(tls: fixture.goodServer)
        defer { server.shutdown() }
        // A context of the test's own: no session from another test.
        let context = try TLSClientContext(.init(caFile: fixture.authority.caCertificatePath))
        /// Connects, makes the handshake, sends PING and reads PONG (and the server's tickets).
        func connectAndPing() throws -> Bool {
            let descriptor = try Self.connectLoopback(port: server.port)
            defer { close(descriptor) }
            let stream = try TLSStream(context: context, descriptor: descriptor, serverName: "localhost")
            let ping = Array("*1\r\n$4\r\nPING\r\n".utf8)
            try ping.withUnsafeBytes { bytes in Result { () throws(TLSError) in try stream.write(bytes) } }.get()
            var reply = [UInt8](repeating: 0, count: 64)
            let count = try reply.withUnsafeMutableBytes { buffer in
                Result { () throws(TLSError) in try stream.read(into: buffer) }
            }.get()
            #expect(Array(reply.prefix(count)) == Array("+PONG\r\n".utf8))
            return stream.resumedSession
        }
        #expect(try connectAndPing() == false)
        #expect(try connectAndPing() == true)
        #expect(try connectAndPing() == true)
        // The same port, another certificate: the session offered does not stand in for it.
        server.stop()
        server.tls = fixture.refusedServers[0].files
        try server.start()
        #expect {
            _ = try connectAndPing()
        } throws: { error in
            (error as? TLSError)?.code == .peerCertificateRefused
        }
    }

    private static func connectLoopback(port: Int) throws -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                connect(descriptor, generic, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else {
            let failure = POSIXError(.init(rawValue: errno) ?? .EIO)
            close(descriptor)
            throw failure
        }
        return descriptor
    }
}

/// The read and write system calls this thread has made so far, from `/proc/thread-self/io`.
/// Reading that file is itself one read(2) (and no write), counted in the next reading:
/// `since(_:)` takes it off.
private struct ThreadSystemCalls {
    let reads: Int
    let writes: Int

    static func now() throws -> ThreadSystemCalls {
        let descriptor = open("/proc/thread-self/io", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 1024)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0, count < buffer.count else { throw POSIXError(.EIO) }
        var values: [Substring: Int] = [:]
        for line in String(decoding: buffer.prefix(count), as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: ":")
            if parts.count == 2 { values[parts[0]] = Int(parts[1].trimmingCharacters(in: .whitespaces)) }
        }
        guard let reads = values["syscr"], let writes = values["syscw"] else { throw POSIXError(.EIO) }
        return ThreadSystemCalls(reads: reads, writes: writes)
    }

    /// The reads and writes made between `earlier` and this reading, the reading of `earlier` left out.
    func since(_ earlier: ThreadSystemCalls) -> (reads: Int, writes: Int) {
        (reads - earlier.reads - 1, writes - earlier.writes)
    }
}
