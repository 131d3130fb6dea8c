import SIWACrypto
import Testing

/// A failing OpenSSL call's error keeps what OpenSSL said (its error queue), not only ours.
@Suite("Crypto errors")
struct CryptoErrorTests {
    @Test("a refused key generation carries OpenSSL's reason text")
    func keyGenerationReason() throws {
        let error = try #require(throws: CryptoError.self) { try RSAPrivateKey.generate(bits: 256) }
        #expect(error.message == "RSA key generation failed")
        #expect(error.openSSLReasons == ["key size too small"])
        #expect(error.description == "RSA key generation failed (OpenSSL: key size too small)")
    }

    @Test("a PEM that does not decode carries OpenSSL's reason text")
    func pemReason() throws {
        let pem = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
        let error = try #require(throws: CryptoError.self) { try RSAPrivateKey(pem: pem) }
        #expect(error.message == "not a PEM private key")
        #expect(!error.openSSLReasons.isEmpty)
    }

    @Test("RS256: a signature made in Swift verifies, and one altered byte does not")
    func signAndVerify() throws {
        let key = try RSAPrivateKey.generate(bits: 2048)
        let publicKey = try key.publicKey()
        let message = Array("header.claims".utf8)
        var signature = try key.signRS256(message)
        #expect(signature.count == 256)
        #expect(publicKey.isValidRS256Signature(signature, for: message))
        signature[17] ^= 1
        #expect(!publicKey.isValidRS256Signature(signature, for: message))
        let restored = try RSAPrivateKey(pem: try key.pem())
        #expect(try restored.modulus() == (try key.modulus()))
        #expect(try key.exponent() == [1, 0, 1])
    }
}
