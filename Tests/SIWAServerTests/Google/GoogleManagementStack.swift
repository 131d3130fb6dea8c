import Foundation
import SIWACrypto
import SIWAGoogleAPI
import SIWAJSON
import SIWARedis
import SIWASettings
import SIWAStore

/// A local stack for `siwa-endpoint google`: a stand-in for Google's RISC management API
/// (deploy-tests/standins/google_risc_standin.py) over HTTPS under a test CA, a service
/// account key file made at test time (RSA-2048, Google's JSON format, mode 0600), and a
/// real redis-server for `verify`. Google itself cannot be reached from a test; the stand-in
/// checks the authorisation JWT exactly (RS256 with the key's public part, header, claims)
/// and each endpoint's body.
final class GoogleManagementStack {
    static let clientEmail = "risc-admin@siwa-test-project.iam.gserviceaccount.com"
    static let keyID = "0123456789abcdef0123456789abcdef01234567"
    static let receiverURL = "https://endpoint.example.com/google/risc"

    static let standinScript = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("deploy-tests/standins/google_risc_standin.py").path

    let directory: URL
    let authority: TestCertificateAuthority
    let key: RSAPrivateKey
    /// The service account's JSON key file, 0600.
    let keyFilePath: String
    let logPath: String
    let redis: RedisServerProcess?
    private var standin: Process?
    private(set) var apiURL = ""

    init(redis withRedis: Bool = false) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-google-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        authority = try TestCertificateAuthority(in: directory)
        key = try RSAPrivateKey.generate()
        keyFilePath = directory.appendingPathComponent("service-account.json").path
        logPath = directory.appendingPathComponent("standin.log").path
        try Self.writeKeyFile(keyFilePath, key: key)
        let publicPath = directory.appendingPathComponent("public.pem").path
        let privatePath = directory.appendingPathComponent("private.pem").path
        try key.pem().write(toFile: privatePath, atomically: true, encoding: .utf8)
        try ReconcileStack.openssl(["pkey", "-in", privatePath, "-pubout", "-out", publicPath])
        try FileManager.default.removeItem(atPath: privatePath)
        redis = withRedis ? try RedisServerProcess() : nil
    }

    /// Google's JSON key format, as the Cloud console downloads it, at mode 0600.
    static func writeKeyFile(
        _ path: String, key: RSAPrivateKey, email: String = clientEmail, keyID: String = keyID
    ) throws {
        let document = JSONWriter.object([
            ("type", .string("service_account")), ("project_id", .string("siwa-test-project")),
            ("private_key_id", .string(keyID)), ("private_key", .string(try key.pem())),
            ("client_email", .string(email)), ("client_id", .string("100000000000000000001")),
            ("token_uri", .string("https://oauth2.googleapis.com/token")),
        ])
        _ = FileManager.default.createFile(
            atPath: path, contents: Data(document.utf8), attributes: [.posixPermissions: 0o600])
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
    }

    /// Starts the stand-in; `answers` scripts the first answers per endpoint
    /// (`["stream:update": [["status": 403, "message": "..."]]]`).
    func start(answers: [String: [[String: String]]] = [:], arguments: [String] = []) throws {
        var extra = arguments
        if !answers.isEmpty {
            let path = directory.appendingPathComponent("answers.json").path
            let document = JSONValue.object(
                answers.mapValues { list in
                    .array(
                        list.map { answer in
                            .object(
                                Dictionary(
                                    uniqueKeysWithValues: answer.map { name, value in
                                        (name, name == "status" ? .integer(Int64(value) ?? 0) : .string(value))
                                    }))
                        })
                })
            try JSONWriter.serialize(document).write(toFile: path, atomically: true, encoding: .utf8)
            extra += ["--answers", path]
        }
        if let redis { extra += ["--redis-port", String(redis.port)] }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ExampleFiles.python)
        process.arguments =
            [
                Self.standinScript, "--cert", authority.serverCertificatePath, "--key", authority.serverKeyPath,
                "--public-key", directory.appendingPathComponent("public.pem").path, "--key-id", Self.keyID,
                "--client-email", Self.clientEmail, "--log", logPath,
            ] + extra
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        standin = process
        var text = ""
        while !text.contains("\n") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        guard text.hasPrefix("listening "), let port = Int(text.dropFirst(10).prefix { $0.isNumber }) else {
            throw TestCertificateAuthority.Failure(description: "the Google stand-in did not start: \(text)")
        }
        apiURL = "https://localhost:\(port)"
    }

    /// The client `google` builds, with the test CA and short retry delays.
    func client(key: GoogleServiceAccountKey? = nil, attempts: Int = 3, longestWait: Duration = .seconds(60))
        throws -> GoogleManagementClient
    {
        GoogleManagementClient(
            apiURL: apiURL,
            authorization: GoogleManagementAuthorization(
                key: try key ?? GoogleServiceAccountKey(contentsOf: keyFilePath)),
            caFile: authority.caCertificatePath, timeoutSeconds: 5, attempts: attempts, retryDelayMilliseconds: 20,
            longestWait: longestWait)
    }

    /// The settings `siwa-endpoint google` runs with against the stand-in.
    var environment: [String: String] {
        var environment = [
            "SIWA_GOOGLE_SERVICE_ACCOUNT_FILE": keyFilePath, "SIWA_GOOGLE_RISC_API_URL": apiURL,
            "SIWA_GOOGLE_CA_FILE": authority.caCertificatePath, "SIWA_GOOGLE_RECEIVER_URL": Self.receiverURL,
            "SIWA_REDIS_TIMEOUT_MS": "500",
        ]
        if let redis { environment["SIWA_REDIS_URL"] = redis.url() }
        return environment
    }

    /// One line of the stand-in's log.
    struct Request {
        let endpoint: String
        let status: Int
        let problem: String?
        let header: [String: JSONValue]
        let claims: [String: JSONValue]
        let body: JSONValue?
    }

    /// What the stand-in received, in order.
    func requests() throws -> [Request] {
        guard FileManager.default.fileExists(atPath: logPath) else { return [] }
        return try String(contentsOfFile: logPath, encoding: .utf8).split(separator: "\n").map { line in
            guard case .object(let members) = try StrictJSONParser.parse(Array(line.utf8)) else {
                return Request(endpoint: "?", status: 0, problem: nil, header: [:], claims: [:], body: nil)
            }
            func object(_ name: String) -> [String: JSONValue] {
                if case .object(let value)? = members[name] { return value }
                return [:]
            }
            var status = 0
            if case .integer(let value)? = members["status"] { status = Int(value) }
            var endpoint = "?"
            if case .string(let value)? = members["endpoint"] { endpoint = value }
            var problem: String?
            if case .string(let value)? = members["problem"] { problem = value }
            return Request(
                endpoint: endpoint, status: status, problem: problem, header: object("header"),
                claims: object("claims"), body: members["body"])
        }
    }

    func shutdown() {
        if let standin, standin.isRunning {
            kill(standin.processIdentifier, SIGKILL)
            standin.waitUntilExit()
        }
        redis?.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }
}
