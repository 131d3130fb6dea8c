import SIWARedis
import Testing

struct RedisEndpointTests {
    @Test func defaultsPortAndDatabase() throws {
        let endpoint = try RedisEndpoint(parsing: "redis://localhost")
        #expect(endpoint == RedisEndpoint(address: .tcp(host: "localhost", port: 6379), database: 0))
        #expect(try RedisEndpoint(parsing: "redis://127.0.0.1/") == endpoint.with(host: "127.0.0.1"))
    }

    @Test func hostPortDatabase() throws {
        let endpoint = try RedisEndpoint(parsing: "redis://10.0.0.5:6380/3")
        #expect(endpoint.address == .tcp(host: "10.0.0.5", port: 6380))
        #expect(endpoint.database == 3)
        #expect(endpoint.password == nil)
        #expect(endpoint.username == nil)
    }

    @Test func passwordAndUser() throws {
        let anonymous = try RedisEndpoint(parsing: "redis://:s3cr%40t@cache:6379/1")
        #expect(anonymous.password == "s3cr@t")
        #expect(anonymous.username == nil)
        #expect(anonymous.database == 1)
        #expect(!anonymous.description.contains("s3cr"))
        #expect(anonymous.description == "redis://:***@cache:6379/1")

        let named = try RedisEndpoint(parsing: "redis://app:pw@cache/0")
        #expect(named.username == "app")
        #expect(named.password == "pw")
        #expect(named.address == .tcp(host: "cache", port: 6379))
    }

    @Test func ipv6Host() throws {
        let endpoint = try RedisEndpoint(parsing: "redis://[::1]:7000/2")
        #expect(endpoint.address == .tcp(host: "::1", port: 7000))
        #expect(endpoint.database == 2)
        #expect(endpoint.description == "redis://[::1]:7000/2")
    }

    @Test("rediss:// is redis:// over TLS: the same parts, TLS on, and `rediss` in the logged form")
    func tlsURL() throws {
        let endpoint = try RedisEndpoint(parsing: "rediss://app:pw@cache.example:6380/2")
        #expect(
            endpoint
                == RedisEndpoint(
                    address: .tcp(host: "cache.example", port: 6380), database: 2, username: "app", password: "pw",
                    tls: RedisTLS()))
        #expect(endpoint.description == "rediss://app:***@cache.example:6380/2")
        #expect(try RedisEndpoint(parsing: "redis://cache.example:6380/2").tls == nil)
        #expect(try RedisEndpoint(parsing: "rediss://[::1]").address == .tcp(host: "::1", port: 6379))
    }

    @Test func unixSocket() throws {
        let plain = try RedisEndpoint(parsing: "unix:///run/redis/redis.sock")
        #expect(plain.address == .unixSocket(path: "/run/redis/redis.sock"))
        #expect(plain.database == 0)

        let withDatabase = try RedisEndpoint(parsing: "unix:///run/redis/redis.sock?db=5")
        #expect(withDatabase.address == .unixSocket(path: "/run/redis/redis.sock"))
        #expect(withDatabase.database == 5)

        let withPassword = try RedisEndpoint(parsing: "unix:///tmp/r.sock?db=2&password=p%26w")
        #expect(withPassword.password == "p&w")
        #expect(withPassword.database == 2)
        #expect(!withPassword.description.contains("p&w"))
    }

    @Test(
        arguments: [
            ("", "must start with redis://, rediss:// (TLS) or unix://"),
            ("http://localhost", "must start with redis://, rediss:// (TLS) or unix://"),
            ("rediss://", "host is missing"),
            ("rediss://localhost?tls=no", "takes no query or fragment"),
            ("redis://", "host is missing"),
            ("redis://:6379", "host is missing"),
            ("redis://localhost:0", "port must be a number from 1 to 65535"),
            ("redis://localhost:65536", "port must be a number from 1 to 65535"),
            ("redis://localhost:abc", "port must be a number from 1 to 65535"),
            ("redis://localhost:-1", "port must be a number from 1 to 65535"),
            ("redis://localhost/db1", "path must be a database number"),
            ("redis://localhost/-1", "path must be a database number"),
            ("redis://localhost/1/2", "path must be a database number"),
            ("redis://localhost/0?timeout=1", "no query"),
            ("redis://secret@localhost", "user info must be"),
            ("redis://:@localhost", "password after ':' is empty"),
            ("redis://:bad%zzescape@localhost", "password has a bad percent escape"),
            ("redis://[::1:6379", "no closing ']'"),
            ("redis://[::1]x", "unexpected text after the IPv6 host"),
            ("redis://local host", "space or control character"),
            ("unix://", "socket path must be absolute"),
            ("unix://relative/redis.sock", "socket path must be absolute"),
            ("unix:///tmp/r.sock?db=x", "db must be a database number"),
            ("unix:///tmp/r.sock?db", "has no '='"),
            ("unix:///tmp/r.sock?db=1&db=2", "twice"),
            ("unix:///tmp/r.sock?timeout=1", "unknown query parameter"),
        ])
    func refusesBadURLs(text: String, expectedFragment: String) {
        #expect {
            try RedisEndpoint(parsing: text)
        } throws: { error in
            guard let error = error as? RedisError else { return false }
            return error.code == .invalidEndpoint && error.message.contains(expectedFragment)
        }
    }

    @Test func errorNeverEchoesThePassword() {
        do {
            _ = try RedisEndpoint(parsing: "redis://:hunter2@localhost:99999")
            Issue.record("a port over 65535 was accepted")
        } catch {
            #expect(error.code == .invalidEndpoint)
            #expect(!error.message.contains("hunter2"))
        }
    }
}

extension RedisEndpoint {
    fileprivate func with(host: String) -> RedisEndpoint {
        guard case .tcp(_, let port) = address else { return self }
        return RedisEndpoint(address: .tcp(host: host, port: port), database: database)
    }
}
