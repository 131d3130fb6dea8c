import Foundation
import SIWAFastCGIClient
import SIWAJSON
import SIWARedis
import SIWATestKit
import SIWAVerification

/// A whole local stack for one test: a real redis-server, a real nginx serving the
/// test JWKS over HTTPS under a test CA (standing in for appleid.apple.com, which
/// cannot be reached from here), and the real `siwa-endpoint serve` on a unix socket: a
/// process, or with `inProcess` the same assembly built in the test's process (for what
/// needs no process of its own: no signal, exit status or log line of serve's asserted).
final class ServeStack {
    static let clientID = "com.example.app"

    let directory: URL
    let redis: RedisServerProcess
    let jwks: JWKSTestServer
    let key: TestSigningKey
    var serve: ServeProcess?
    /// Serve built in process (`inProcess`), in place of `serve`.
    private(set) var inProcessServe: InProcessServe?
    let inProcess: Bool
    let extraEnvironment: [String: String]
    /// The SIWA_REDIS_URL serve gets, when not the test Redis's default user.
    var serveRedisURL: String?
    /// A program serve runs under (strace), empty for none.
    var launcher: [String] = []

    var socketPath: String { directory.appendingPathComponent("fcgi.sock").path }
    var spoolDirectory: String { directory.appendingPathComponent("spool").path }

    init(
        appendOnlyRedis: Bool = false, extraEnvironment: [String: String] = [:], startingServe: Bool = true,
        launcher: [String] = [], initialJWKSDocument: String? = nil, inProcess: Bool = false
    ) throws {
        self.inProcess = inProcess
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-serve-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.extraEnvironment = extraEnvironment
        self.launcher = launcher
        redis = try RedisServerProcess(appendOnly: appendOnlyRedis)
        jwks = try JWKSTestServer()
        key = try TestSigningKey.generate(keyID: "test-apple-key-\(UUID().uuidString.prefix(8))")
        try jwks.serve(Array((initialJWKSDocument ?? TestSigningKey.jwksDocument([key])).utf8))
        if startingServe { try startServe() }
    }

    var environment: [String: String] {
        [
            "SIWA_CLIENT_IDS": "\(Self.clientID),com.example.watch",
            "SIWA_JWKS_URL": jwks.keysURL,
            "SIWA_JWKS_CA_FILE": jwks.authority.caCertificatePath,
            "SIWA_JWKS_CACHE": directory.appendingPathComponent("jwks-cache.json").path,
            "SIWA_REDIS_URL": serveRedisURL ?? redis.url(),
            // Two seconds for Redis, and one for /healthz's PING (the product's are 1 s and
            // 80 ms): three test processes share two cores, and a round trip or a PING that
            // a busy machine delays past a short bound turns an `applied` into `spooled`, or
            // a /healthz 200 into 503 `ping_timeout`. Tests about those bounds set their own.
            "SIWA_REDIS_TIMEOUT_MS": "2000",
            "SIWA_HEALTH_PING_TIMEOUT_MS": "1000",
            "SIWA_FCGI_SOCKET": socketPath,
            "SIWA_SPOOL_DIR": spoolDirectory,
            "SIWA_WORKERS": "3",
        ].merging(extraEnvironment) { _, extra in extra }
    }

    func startServe() throws {
        if inProcess {
            inProcessServe = try InProcessServe(environment: environment)
            return
        }
        serve = try ServeProcess(
            environment: environment, socketPath: socketPath, logURL: directory.appendingPathComponent("serve.log"),
            launcher: launcher)
    }

    /// A signed request body, as Apple sends it.
    func body(
        type: String, sub: String, eventTimeMilliseconds: Int64? = nil, email: String? = nil,
        isPrivateEmail: Bool? = nil, clientID: String = ServeStack.clientID, signedWith signer: TestSigningKey? = nil
    ) throws -> [UInt8] {
        let now = Int64(Date().timeIntervalSince1970)
        let notification = TestNotification(
            type: type, subject: sub, clientID: clientID, email: email, isPrivateEmail: isPrivateEmail,
            eventTimeMilliseconds: eventTimeMilliseconds ?? (now - 5) * 1000, issuedAt: now - 1)
        return Array(try notification.requestBody(signedWith: signer ?? key).utf8)
    }

    func post(_ body: [UInt8], path: String = "/apple/notifications", requestID: String = "test-request") throws
        -> FastCGIClient.Response
    {
        try FastCGIClient(.unixSocket(socketPath)).send(
            params: FastCGIClient.params(
                method: "POST", uri: path, body: body, contentType: "application/json",
                extra: [("REQUEST_ID", requestID)]),
            body: body)
    }

    /// Posts each body while Redis is stopped (each answered from the spool), then starts Redis
    /// again: how a record reaches the spool that Redis may then refuse on replay (a refusal
    /// about the record on the live path is a 503, never spooled). Keys set before survive
    /// only with `appendOnlyRedis`.
    func postWhileRedisIsDown(_ bodies: [[UInt8]]) throws -> [FastCGIClient.Response] {
        redis.stop()
        let responses = try bodies.map { try post($0) }
        try redis.start()
        return responses
    }

    func request(_ method: String, _ path: String) throws -> FastCGIClient.Response {
        try FastCGIClient(.unixSocket(socketPath)).send(params: FastCGIClient.params(method: method, uri: path))
    }

    /// GET /healthz, asked again (at most four more times, 250 ms apart) while its answer is
    /// a 503 saying only that Redis's PING missed /healthz's bound (`redis_circuit`:
    /// `ping_timeout`; `SIWA_HEALTH_PING_TIMEOUT_MS`, which the stack sets to 1 s): with
    /// three test processes' Redis servers on two cores a PING once took longer than the
    /// product's 80 ms, and a test about a moved slot read that 503. A PING that never
    /// answers still reads 503 here; a 503 for any other reason is returned at once. Tests
    /// about the bound itself ask `request("GET", "/healthz")`.
    func health() throws -> FastCGIClient.Response {
        var answer = try request("GET", "/healthz")
        var retries = 4
        while retries > 0 && answer.status == 503 && answer.jsonFields["redis_circuit"] == "ping_timeout" {
            retries -= 1
            usleep(250_000)
            answer = try request("GET", "/healthz")
        }
        return answer
    }

    func redisConnection() -> RedisConnection {
        RedisConnection(endpoint: try! RedisEndpoint(parsing: redis.url()))
    }

    func userHash(sub: String, clientID: String = ServeStack.clientID) throws -> [String: String] {
        try redisConnection().command("HGETALL", "siwa:user:{\(clientID):\(sub)}").fieldMap ?? [:]
    }

    func streamLength() throws -> Int64 { try redisConnection().command("XLEN", "siwa:events").integer ?? -1 }

    /// Every key and its type: what "Redis untouched" is compared with. `siwa:clients` (the
    /// silence figures' bookkeeping: since when each client ID is served, written once when
    /// Redis first answers a scrape) holds no notification's state and is left out.
    func redisSnapshot() throws -> [String] {
        let connection = redisConnection()
        let keys = (try connection.command("KEYS", "*").array ?? []).compactMap(\.string).filter {
            $0 != "siwa:clients"
        }.sorted()
        return try keys.map { key in "\(key)=\(try connection.command("TYPE", key).string ?? "?")" }
    }

    /// The tests' one `waitUntil` (polling every 50 ms), where the stack's tests call it.
    func waitUntil(timeout: TimeInterval, _ condition: () throws -> Bool) rethrows -> Bool {
        try SIWATestSupport.waitUntil(timeout: timeout, condition)
    }

    func shutdown() {
        serve?.kill()
        inProcessServe?.stop()
        jwks.shutdown()
        redis.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }
}

extension FastCGIClient.Response {
    /// The JSON body as a dictionary of strings (responses are flat).
    var jsonFields: [String: String] {
        guard case .object(let members)? = try? StrictJSONParser.parse(body) else { return [:] }
        return members.compactMapValues {
            switch $0 {
            case .string(let text): text
            case .integer(let number): String(number)
            default: nil
            }
        }
    }
}
