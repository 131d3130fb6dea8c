import Foundation
import SIWARedis
import Testing

struct RedisConnectionTests {
    @Test func repliesOfEveryShape() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))

        #expect(try connection.command("PING") == .status("PONG"))
        #expect(try connection.command("SET", "k", "v") == .status("OK"))
        #expect(try connection.command("GET", "k") == .bulkString(Array("v".utf8)))
        #expect(try connection.command("GET", "missing") == .null)
        #expect(try connection.command("INCR", "counter") == .integer(1))
        #expect(try connection.command("RPUSH", "list", "a", "", "c") == .integer(3))
        #expect(
            try connection.command("LRANGE", "list", "0", "-1")
                == .array([.bulkString(Array("a".utf8)), .bulkString([]), .bulkString(Array("c".utf8))]))
        // An error nested in an array stays a value; only a top-level error throws.
        #expect(
            try connection.command("EVAL", "return {1, redis.error_reply('NESTED boom')}", "0")
                == .array([.integer(1), .error("NESTED boom")]))
        #expect(connection.isConnected)
    }

    @Test func argumentsAreBinarySafe() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
        let value: [UInt8] = [0, 13, 10, 255, 0x24, 0x2A, 0]
        #expect(try connection.command([Array("SET".utf8), [0, 1], value]) == .status("OK"))
        #expect(try connection.command([Array("GET".utf8), [0, 1]]) == .bulkString(value))
        #expect(try connection.command([Array("STRLEN".utf8), [0, 1]]) == .integer(7))
    }

    @Test func serverErrorIsThrownWithItsText() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
        _ = try connection.command("SET", "text", "x")
        #expect {
            try connection.command("INCR", "text")
        } throws: { error in
            guard let error = error as? RedisError else { return false }
            return error.code == .serverError && error.message == "ERR value is not an integer or out of range"
                && !error.isConnectionError
        }
        // A server error leaves the connection usable.
        #expect(connection.isConnected)
        #expect(try connection.command("GET", "text") == .bulkString(Array("x".utf8)))
    }

    @Test func authenticatesAndSelectsTheDatabase() throws {
        let server = try RedisServerProcess(password: "test-password")
        defer { server.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url(database: 4)))
        _ = try connection.command("SET", "where", "db4")
        #expect(try connection.command("CLIENT", "INFO").string?.contains(" db=4 ") == true)

        let other = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url(database: 0)))
        #expect(try other.command("GET", "where") == .null)
        #expect(try other.command("SELECT", "4") == .status("OK"))
        #expect(try other.command("GET", "where") == .bulkString(Array("db4".utf8)))
    }

    @Test func wrongPasswordIsAConnectionFailure() throws {
        let server = try RedisServerProcess(password: "right-password")
        defer { server.shutdown() }
        let endpoint = try RedisEndpoint(parsing: "redis://:wrong-password@127.0.0.1:\(server.port)/0")
        let connection = RedisConnection(endpoint: endpoint)
        do {
            _ = try connection.command("PING")
            Issue.record("a wrong password was accepted")
        } catch {
            #expect(error.code == .connectionFailed)
            #expect(error.message.contains("AUTH"))
            #expect(!error.message.contains("wrong-password"))
            // The server's refusal of AUTH is kept as the cause, not only as text.
            #expect(error.isLoginRefused)
            guard case .loginRefused(let refusal) = error.cause else {
                Issue.record("the AUTH refusal is not kept as the cause: \(String(describing: error.cause))")
                return
            }
            #expect(refusal.code == .serverError)
        }
        #expect(!connection.isConnected)
    }

    @Test func unixSocketWithDatabase() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(
            endpoint: try RedisEndpoint(parsing: "unix://\(server.unixSocketPath)?db=2"))
        _ = try connection.command("SET", "via", "socket")
        let tcp = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url(database: 2)))
        #expect(try tcp.command("GET", "via") == .bulkString(Array("socket".utf8)))
    }

    @Test func refusedWhenTheServerIsDownThenRecoversAfterRestart() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
        #expect(try connection.command("PING") == .status("PONG"))

        server.stop()
        // The idle socket was closed by the server: the next command fails, as a connection error.
        #expect {
            try connection.command("PING")
        } throws: { error in
            (error as? RedisError)?.isConnectionError == true
        }
        #expect(!connection.isConnected)
        // Still down: reconnecting is refused.
        #expect {
            try connection.command("PING")
        } throws: { error in
            (error as? RedisError)?.code == .connectionFailed
        }

        try server.start()
        #expect(try connection.command("PING") == .status("PONG"))
        #expect(connection.isConnected)
    }

    @Test func neverConnectedServerThenStarted() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        server.kill()
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: server.url()))
        do {
            _ = try connection.command("PING")
            Issue.record("a command succeeded with no server")
        } catch {
            #expect(error.code == .connectionFailed)
            #expect(error.message.contains("127.0.0.1:\(server.port)"))
        }
        try server.start()
        #expect(try connection.command("PING") == .status("PONG"))
    }

    @Test func commandTimeoutHoldsAgainAfterReconnect() throws {
        let server = try RedisServerProcess()
        defer { server.shutdown() }
        let connection = RedisConnection(
            endpoint: try RedisEndpoint(parsing: server.url()), connectTimeout: .seconds(1),
            commandTimeout: .milliseconds(200))
        for round in 1...2 {
            // BLPOP would block for 30 s; the 200 ms command timeout must cut it short
            // both before and after the reconnect. The bound (10 s) is generous for a
            // loaded 2-core machine and still a third of what an uncut BLPOP takes.
            let started = Date()
            #expect(throws: RedisError.self, "round \(round)") {
                try connection.command("BLPOP", "never-filled", "30")
            }
            let elapsed = Date().timeIntervalSince(started)
            #expect(elapsed < 10, "round \(round) waited \(elapsed) s")
            #expect(!connection.isConnected)
            #expect(try connection.command("PING") == .status("PONG"))
        }
    }
}
