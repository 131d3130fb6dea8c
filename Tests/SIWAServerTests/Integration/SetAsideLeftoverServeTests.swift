import Foundation
import SIWAVerification
import Testing

@testable import SIWASpool

/// What a crash left in `rejected/` is settled by the real `serve` at start, and logged.
@Suite("serve settles crash leftovers in rejected/", .serialized)
struct SetAsideLeftoverServeTests {
    @Test("a lone rejected/*.log.tmp holding an address is deleted at start, one spool_leftover_settled line")
    func loneLeftoverIsDeletedAndLogged() throws {
        let stack = try ServeStack(startingServe: false)
        defer { stack.shutdown() }
        let rejected = stack.spoolDirectory + "/rejected"
        try FileManager.default.createDirectory(
            atPath: rejected, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let leftover = rejected + "/record-00000001796000000000-4242-1.log.tmp"
        let record = VerifiedNotification(
            clientID: ServeStack.clientID, subject: "000051.left.0001", type: .emailEnabled, rawType: "email-enabled",
            eventTimeMilliseconds: 1_796_000_000_000, tokenID: "leftover-1", issuedAt: 1_796_000_001,
            expiresAt: 1_796_086_401, email: "left-51@privaterelay.appleid.com", isPrivateEmail: true)
        let bytes = SpoolRecord.encode(record, spooledAt: 1_796_000_000_500)
        #expect(FileManager.default.createFile(atPath: leftover, contents: Data(bytes.prefix(bytes.count - 7))))

        try stack.startServe()
        let lines = stack.serve?.logLines(event: "spool_leftover_settled") ?? []
        #expect(lines.count == 1, "\(stack.serve?.logText ?? "")")
        #expect(lines.first?.contains(#""level":"warning""#) == true)
        #expect(lines.first?.contains(#""file":"\#(leftover)""#) == true)
        #expect(lines.first?.hasSuffix(#""action":"deleted"}"#) == true, "\(lines)")
        #expect(!FileManager.default.fileExists(atPath: leftover))
        #expect(try FileManager.default.contentsOfDirectory(atPath: rejected).isEmpty)
        #expect(stack.serve?.logText.contains("@") == false)
        #expect(try stack.redisSnapshot() == [])
    }
}
