import Foundation
import SIWACrypto
import Synchronization
import Testing

/// One `RSAPublicKey` checks signatures for every worker thread at once: each check works
/// on its own copy of the verification context the key made once, never on the original.
@Suite("RS256 public key")
struct RSAPublicKeyTests {
    @Test("one key shared by 8 threads: every genuine signature verifies and every altered one fails")
    func sharedAcrossThreads() throws {
        let privateKey = try RSAPrivateKey.generate()
        let key = try privateKey.publicKey()
        let messages = (0..<16).map { Array("header.claims-\($0)".utf8) }
        let signatures = try messages.map { try privateKey.signRS256($0) }
        let wrongAnswers = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for round in 0..<200 {
                let index = (thread + round) % messages.count
                var altered = signatures[index]
                altered[round % altered.count] ^= 0x01
                let genuine = key.isValidRS256Signature(signatures[index], for: messages[index])
                let forged = key.isValidRS256Signature(altered, for: messages[index])
                let otherMessage = key.isValidRS256Signature(
                    signatures[index], for: messages[(index + 1) % messages.count][...])
                if !genuine || forged || otherMessage { wrongAnswers.withLock { $0 += 1 } }
            }
        }
        #expect(wrongAnswers.withLock { $0 } == 0)
    }
}
