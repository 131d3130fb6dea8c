import Foundation
import Glibc
import SIWAAppleAPI
import SIWACrypto
import SIWAHTTPS
import SIWASupport
import Synchronization
import Testing

/// A reconcile run built and run in process (no binary started): a real redis-server, the
/// stand-in for Apple's token endpoint over HTTPS, and the run's output caught in memory.
@Suite("reconcile's run, in process", .serialized)
struct ReconcileRunTests {
    /// What the run wrote, line by line, per stream.
    final class Caught: Sendable {
        let lines = Mutex<[String]>([])
        let errors = Mutex<[String]>([])

        var output: CommandOutput {
            CommandOutput(
                line: { line in self.lines.withLock { $0.append(line) } },
                error: { line in self.errors.withLock { $0.append(line) } })
        }
    }

    static func run(_ stack: ReconcileStack, _ lines: [String], caught: Caught) throws -> SIWASupport.ExitStatus {
        let key = try ES256PrivateKey(pem: String(contentsOfFile: stack.keyPath, encoding: .utf8))
        let check = AppleSignedPost(
            tokenURL: stack.tokenURL,
            secret: AppleClientSecret(teamID: ReconcileStack.teamID, keyID: ReconcileStack.keyID, key: key),
            fetcher: HTTPSFetcher(caFilePath: stack.authority.caCertificatePath, timeoutSeconds: 2), attempts: 1,
            retryDelayMilliseconds: 50)
        let settings = AppleRunSettings(
            teamID: ReconcileStack.teamID, tokenURL: stack.tokenURL, revokeURL: stack.tokenURL,
            migrationURL: stack.tokenURL, keyPrefix: "siwa", streamMaximumLength: 1000)
        let text = lines.map { $0 + "\n" }.joined()
        guard let file = fmemopen(nil, max(1, text.utf8.count), "w+") else { throw CocoaError(.fileWriteUnknown) }
        defer { fclose(file) }
        fputs(text, file)
        rewind(file)
        let run = ReconcileRun(
            settings: settings, check: check, json: true, output: caught.output, connection: stack.redisConnection())
        return run.reconcile(file)
    }

    @Test("a valid, a refused and a malformed line: the counts as one JSON document, the refused user's sessions end")
    func mixedLines() throws {
        let stack = try ReconcileStack()
        defer { stack.shutdown() }
        let valid = stack.token("valid", .valid)
        let refused = stack.token("refused", .refused)
        try stack.startStandin()
        let caught = Caught()
        let status = try Self.run(
            stack,
            [
                #"{"client_id":"com.example.app","sub":"000090.a","refresh_token":"\#(valid)"}"#,
                #"{"client_id":"com.example.app","sub":"000090.b","refresh_token":"\#(refused)"}"#, "not json",
            ], caught: caught)
        #expect(status == .success)
        #expect(
            caught.lines.withLock { $0 } == [
                #"{"checked":2,"still_valid":1,"refused":1,"skipped":0,"unknown":0,"malformed":1}"#
            ])
        #expect(caught.errors.withLock { $0 }.isEmpty)
        #expect(try stack.userHash(sub: "000090.b")["sessions_revoked_at"] != nil)
        #expect(try stack.userHash(sub: "000090.a")["sessions_revoked_at"] == nil)
        #expect(try stack.requestCounts() == ["valid": 1, "refused": 1])
    }
}
