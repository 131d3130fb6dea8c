import Foundation
import SIWAJSON
import SIWATestSupport
import SIWAVerification
import Testing

/// keygen → sign → verify through the real binary, with exact output and exit statuses.
@Suite("Command line", .serialized)
final class CommandLineTests {
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    func keygen() throws -> (key: String, jwks: String) {
        let run = try EndpointBinary.run(["keygen", "--out", directory.path, "--kid", "cli-test-key"])
        #expect(run.status == 0)
        let key = directory.appendingPathComponent("test-signing-key.pem").path
        let jwks = directory.appendingPathComponent("test-jwks.json").path
        #expect(run.standardOutput == #"{"kid":"cli-test-key","private_key":"\#(key)","jwks":"\#(jwks)"}"# + "\n")
        return (key, jwks)
    }

    func object(_ text: String) throws -> [String: JSONValue] {
        guard case .object(let members) = try StrictJSONParser.parse(Array(text.utf8)) else {
            Issue.record("not a JSON object: \(text)")
            return [:]
        }
        return members
    }

    @Test("--help lists the subcommands")
    func help() throws {
        let run = try EndpointBinary.run(["--help"])
        #expect(run.status == 0)
        for name in ["keygen", "sign", "verify", "bench"] { #expect(run.standardOutput.contains("  \(name) ")) }
    }

    @Test("keygen writes a private key readable only by its owner and a JWKS with the kid")
    func keygenFiles() throws {
        let (key, jwks) = try keygen()
        let attributes = try FileManager.default.attributesOfItem(atPath: key)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        let keys = try JSONWebKeySet(jsonBytes: Array(try Data(contentsOf: URL(fileURLWithPath: jwks))))
        #expect(keys.usableKeyIDs == ["cli-test-key"])
    }

    @Test("sign then verify: an email event in Apple's shape")
    func signAndVerifyEmailEvent() throws {
        let (key, jwks) = try keygen()
        let signed = try EndpointBinary.run([
            "sign", "--key", key, "--kid", "cli-test-key", "--type", "email-disabled", "--sub", "000111.abc.2222",
            "--client-id", "com.example.app", "--email", "relay@privaterelay.appleid.com", "--private", "true",
            "--event-time", "1796000000123", "--jti", "AAAAAAAAAAAAAAAAAAAAAA", "--iat", "1796000001",
        ])
        #expect(signed.status == 0)
        let body = directory.appendingPathComponent("body.json")
        try Data(signed.standardOutput.utf8).write(to: body)
        let verified = try EndpointBinary.run([
            "verify", "--jwks", jwks, "--client-id", "com.example.other", "--client-id", "com.example.app", "--at",
            "1796000010", body.path,
        ])
        #expect(verified.status == 0)
        #expect(
            verified.standardOutput
                == #"{"client_id":"com.example.app","sub":"000111.abc.2222","type":"email-disabled","raw_type":"email-disabled","event_time_ms":1796000000123,"jti":"AAAAAAAAAAAAAAAAAAAAAA","iat":1796000001,"exp":1796086401,"email":"relay@privaterelay.appleid.com","is_private_email":true}"#
                + "\n")
    }

    @Test("sign --documented-shape with the older deletion spelling, verified from standard input")
    func documentedShapeFromStandardInput() throws {
        let (key, jwks) = try keygen()
        let signed = try EndpointBinary.run([
            "sign", "--key", key, "--kid", "cli-test-key", "--type", "account-delete", "--sub", "000111.abc.2222",
            "--client-id", "com.example.app", "--iat", "1796000001", "--documented-shape",
        ])
        #expect(signed.status == 0)
        let verified = try EndpointBinary.run(
            ["verify", "--jwks", jwks, "--client-id", "com.example.app", "--at", "1796000002", "-"],
            input: Data(signed.standardOutput.utf8))
        #expect(verified.status == 0)
        let result = try object(verified.standardOutput)
        #expect(result["type"] == .string("account-deleted"))
        #expect(result["raw_type"] == .string("account-delete"))
        #expect(result["event_time_ms"] == .integer(1_796_000_001_000))
        #expect(result["exp"] == .null)
        #expect(result["email"] == nil)
    }

    @Test("sign --count: distinct bodies, one per line, each verifies with its own sub and jti")
    func signCount() throws {
        let (key, jwks) = try keygen()
        let base = [
            "sign", "--key", key, "--kid", "cli-test-key", "--type", "consent-revoked", "--sub", "000111.abc",
            "--client-id", "com.example.app", "--iat", "1796000001",
        ]
        let signed = try EndpointBinary.run(base + ["--count", "3"])
        #expect(signed.status == 0)
        let lines = signed.standardOutput.split(separator: "\n").map(String.init)
        #expect(lines.count == 3)
        var tokenIDs: Set<String> = []
        for (index, line) in lines.enumerated() {
            let verified = try EndpointBinary.run(
                ["verify", "--jwks", jwks, "--client-id", "com.example.app", "--at", "1796000002", "-"],
                input: Data(line.utf8))
            #expect(verified.status == 0)
            let result = try object(verified.standardOutput)
            #expect(result["sub"] == .string("000111.abc.\(index + 1)"))
            if case .string(let tokenID)? = result["jti"] { tokenIDs.insert(tokenID) }
        }
        #expect(tokenIDs.count == 3)
        #expect(try EndpointBinary.run(base + ["--count", "0"]).status == 2)
        #expect(try EndpointBinary.run(base + ["--count", "2", "--jti", "same"]).status == 2)
    }

    @Test("a refusal exits 1 with the code, the status and a message")
    func refusal() throws {
        let (key, jwks) = try keygen()
        let signed = try EndpointBinary.run([
            "sign", "--key", key, "--kid", "cli-test-key", "--type", "consent-revoked", "--sub", "000111.abc.2222",
            "--client-id", "com.example.app", "--iat", "1796000001",
        ])
        let expired = try EndpointBinary.run(
            ["verify", "--jwks", jwks, "--client-id", "com.example.app", "--at", "1796200000"],
            input: Data(signed.standardOutput.utf8))
        #expect(expired.status == 1)
        let result = try object(expired.standardOutput)
        #expect(result["error"] == .string("token_expired"))
        #expect(result["http_status"] == .integer(401))
        #expect(result.keys.sorted() == ["error", "http_status", "message"])

        let notOurs = try EndpointBinary.run(
            ["verify", "--jwks", jwks, "--client-id", "com.example.other", "--at", "1796000002"],
            input: Data(signed.standardOutput.utf8))
        #expect(notOurs.status == 1)
        #expect(try object(notOurs.standardOutput)["http_status"] == .integer(403))
    }

    @Test(
        "reconcile --rate out of range is refused by name, exit 2, before any setting is read",
        arguments: ["0.0002", "0.009", "0", "-1", "100.5", "nan", "inf", "5/s"])
    func reconcileRateOutOfRange(_ rate: String) throws {
        let run = try EndpointBinary.run(["reconcile", "--rate", rate, "-"])
        #expect(run.status == 2)
        #expect(run.standardOutput.isEmpty)
        #expect(
            run.standardError
                == "siwa-endpoint reconcile: --rate must be a number of requests per second from 0.01 to 100, got \(rate)\n"
        )
    }

    @Test("reconcile --rate at its bounds passes the check (the run then stops at the missing settings)")
    func reconcileRateBounds() throws {
        for rate in ["0.01", "100"] {
            let run = try EndpointBinary.run(["reconcile", "--rate", rate, "-"])
            #expect(run.status == 2)
            #expect(!run.standardError.contains("--rate"), "\(run.standardError)")
            #expect(run.standardError.contains("SIWA_"), "\(run.standardError)")
        }
    }

    @Test(
        "usage errors exit 2",
        arguments: [["verify"], ["verify", "--jwks", "/nonexistent"], ["sign", "--key"], ["frobnicate"], []])
    func usageErrors(_ arguments: [String]) throws {
        let run = try EndpointBinary.run(arguments)
        #expect(run.status == 2)
        #expect(run.standardOutput.isEmpty)
        #expect(!run.standardError.isEmpty)
    }

    @Test("bench prints Apple's lines as before, then Google's SET against the same bare check, every token verified")
    func benchPrintsBothProviders() throws {
        let run = try EndpointBinary.run(["bench", "--iterations", "3", "--rounds", "1"])
        #expect(run.status == 0, "\(run.standardError)")
        let lines = run.standardOutput.split(separator: "\n").map(String.init)
        // scripts/bench-e2e reads "full verification:" and "full verification CPU time:" by
        // these prefixes, and docs/performance.md quotes the rest: Google's lines come after.
        let prefixes = [
            "notification body: ", "bare OpenSSL RS256 check: ", "full verification:        ",
            "full verification CPU time: ", "ratio full/bare: ", "Google SET: ", "Google SET full verification: ",
            "Google SET full verification CPU time: ", "ratio Google SET full/bare: ",
        ]
        #expect(lines.count == prefixes.count, "\(run.standardOutput)")
        for (line, prefix) in zip(lines, prefixes) { #expect(line.hasPrefix(prefix), "\(line)") }
        #expect(lines.first?.contains("; 1 rounds x 3 iterations each, one thread") == true)
        #expect(
            lines.count > 5 && lines[5].contains(" bytes (sessions-revoked), same key, same rounds, same bare check"))
        let googleRatio = lines.last.flatMap { Double($0.dropFirst(prefixes[8].count).prefix { $0 != " " }) }
        #expect(googleRatio.map { $0 > 0 } == true, "\(lines.last ?? "")")
    }
}
