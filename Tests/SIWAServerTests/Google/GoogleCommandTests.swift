import Foundation
import SIWAGoogleAPI
import SIWAJSON
import SIWARedis
import SIWASettings
import SIWAStore
import Testing

/// `siwa-endpoint google` end to end: the real binary, the stand-in for Google's management
/// API over HTTPS under a test CA, and a real redis-server for `verify`. The verification
/// SET's arrival is simulated by the stand-in writing the verification key the way the
/// endpoint's receiver does once it has verified the SET; the whole path through the
/// receiver (Google's push, nginx, the responder) is proven by the receiver's own tests once
/// both are in one tree.
@Suite("siwa-endpoint google against a stand-in for Google's RISC management API", .serialized)
struct GoogleCommandTests {
    func google(_ stack: GoogleManagementStack, _ arguments: [String], overriding: [String: String] = [:]) throws
        -> CommandRun
    {
        try CommandRun.endpoint(
            ["google"] + arguments, environment: stack.environment.merging(overriding) { $1 }, timeout: .seconds(60))
    }

    func redisKeys(_ stack: GoogleManagementStack) throws -> [String] {
        let redis = try #require(stack.redis)
        let connection = RedisConnection(endpoint: try RedisEndpoint(parsing: redis.url()))
        return (try connection.command("KEYS", "*").array ?? []).compactMap(\.string).sorted()
    }

    @Test("register, status, then verify: the SET arrives, exit 0, the state Google was sent is the key that arrived")
    func registerStatusVerify() throws {
        let stack = try GoogleManagementStack(redis: true)
        defer { stack.shutdown() }
        try stack.start()
        let register = try google(stack, ["register"])
        #expect(register.status == 0, "\(register.errors)")
        #expect(register.output.hasPrefix("registered: Google pushes sessions-revoked, tokens-revoked, token-revoked"))
        let status = try google(stack, ["status", "--json"])
        #expect(status.status == 0, "\(status.errors)")
        guard case .object(let stream) = try StrictJSONParser.parse(Array(status.output.utf8)),
            case .object(let delivery)? = stream["delivery"]
        else {
            Issue.record("status --json is one JSON object: \(status.output)")
            return
        }
        #expect(delivery["url"] == .string(GoogleManagementStack.receiverURL))
        let text = try google(stack, ["status"])
        #expect(text.lines.contains("url:              \(GoogleManagementStack.receiverURL)"))

        let verify = try google(stack, ["verify", "--json", "--timeout", "10"])
        #expect(verify.status == 0, "\(verify.errors)")
        guard case .object(let outcome) = try StrictJSONParser.parse(Array(verify.output.utf8)),
            case .string(let state)? = outcome["state"]
        else {
            Issue.record("verify --json is one JSON object: \(verify.output)")
            return
        }
        #expect(outcome["outcome"] == .string("arrived"))
        #expect(outcome["client_id"] == .string("123-test.apps.googleusercontent.com"))
        #expect(state.count == 32 && state.allSatisfy(\.isHexDigit), "a fresh 128-bit state: \(state)")
        let sent = try stack.requests().filter { $0.endpoint == "stream:verify" }
        #expect(sent.map(\.body) == [.object(["state": .string(state)])])
        #expect(try redisKeys(stack) == ["siwa:google:verification:\(state)"], "verify itself writes nothing")
        #expect(!(verify.output + verify.errors + register.output + register.errors).contains("PRIVATE KEY"))
    }

    @Test("Google accepts the verify but no SET comes: exit 1, saying it was accepted and what to check")
    func nothingArrives() throws {
        let stack = try GoogleManagementStack(redis: true)
        defer { stack.shutdown() }
        try stack.start(arguments: ["--verification", "silent"])
        try stack.client().updateStream(
            receiverURL: GoogleManagementStack.receiverURL, eventTypes: GoogleManagementEvents.all.map(\.uri))
        let verify = try google(stack, ["verify", "--timeout", "5"])
        #expect(verify.status == 1, "\(verify.errors)")
        #expect(verify.errors.contains("Google accepted the request but no SET arrived within 5 s"))
        #expect(try stack.requests().map(\.endpoint) == ["stream:update", "stream:verify"])
    }

    @Test("Google refuses the verify (no configuration): exit 4, saying Google refused, Redis untouched")
    func googleRefusesVerify() throws {
        let stack = try GoogleManagementStack(redis: true)
        defer { stack.shutdown() }
        try stack.start()
        let verify = try google(stack, ["verify", "--timeout", "5"])
        #expect(verify.status == 4, "\(verify.errors)")
        #expect(verify.errors.contains("Google refused the request, so no SET was sent: google_not_configured"))
        #expect(try redisKeys(stack) == [])
    }

    @Test("Redis does not answer: verify exits 3 and asks nothing of Google")
    func redisUnreachable() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start()
        let port = try LoopbackPort.free()
        let verify = try google(stack, ["verify"], overriding: ["SIWA_REDIS_URL": "redis://127.0.0.1:\(port)"])
        #expect(verify.status == 3, "\(verify.errors)")
        #expect(
            verify.errors.contains("Redis does not answer") && verify.errors.contains("nothing was asked of Google"))
        #expect(try stack.requests().isEmpty)
    }

    @Test("the key file readable by others: exit 2, the named refusal, nothing sent, no byte of the key printed")
    func openKeyFileIsRefused() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start()
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: stack.keyFilePath)
        for action in ["register", "status", "enable", "disable", "verify"] {
            let run = try google(stack, [action])
            #expect(run.status == 2, "\(action): \(run.errors)")
            #expect(
                run.errors.contains("SIWA_GOOGLE_SERVICE_ACCOUNT_FILE refused (key_file_permissions)")
                    && run.errors.contains("nothing was sent to Google"), "\(run.errors)")
            #expect(!(run.output + run.errors).contains("PRIVATE KEY"))
        }
        #expect(try stack.requests().isEmpty)
    }

    @Test("exit statuses: refused 4 (403 with Google's cause), unavailable 5 (nothing listens), usage 2")
    func exitStatuses() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start(answers: [
            "status:update": [["status": "403", "message": "The caller does not have permission"]]
        ])
        let refused = try google(stack, ["disable"])
        #expect(refused.status == 4)
        #expect(
            refused.errors.contains("google_forbidden")
                && refused.errors.contains("The caller does not have permission"))
        let port = try LoopbackPort.free()
        let unavailable = try google(
            stack, ["status"], overriding: ["SIWA_GOOGLE_RISC_API_URL": "https://localhost:\(port)"])
        #expect(unavailable.status == 5, "\(unavailable.errors)")
        #expect(unavailable.errors.contains("google_unreachable"))
        for words in [
            [], ["frobnicate"], ["register", "--events", "bogus"], ["status", "--timeout", "9"],
            ["verify", "--timeout", "1"],
        ] {
            #expect(try google(stack, words).status == 2, "\(words)")
        }
        let noReceiver = try google(stack, ["register"], overriding: ["SIWA_GOOGLE_RECEIVER_URL": ""])
        #expect(noReceiver.status == 2 && noReceiver.errors.contains("SIWA_GOOGLE_RECEIVER_URL is required"))
        #expect(try stack.requests().map(\.endpoint) == ["status:update"])
    }

    @Test("register --events narrows the request to the types named")
    func registerNarrowed() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start()
        let run = try google(stack, ["register", "--events", "sessions-revoked,verification", "--json"])
        #expect(run.status == 0, "\(run.errors)")
        let body = try #require(try stack.requests().first?.body)
        guard case .object(let members) = body else {
            Issue.record("\(body)")
            return
        }
        #expect(
            members["events_requested"]
                == .array([
                    .string("https://schemas.openid.net/secevent/risc/event-type/sessions-revoked"),
                    .string("https://schemas.openid.net/secevent/risc/event-type/verification"),
                ]))
    }
}
