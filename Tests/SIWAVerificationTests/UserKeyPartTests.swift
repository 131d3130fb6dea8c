import SIWAVerification
import Testing

/// The one rule for what a `client_id` or a `sub` may hold: both become parts of a user's
/// Redis keys.
@Suite("User key parts")
struct UserKeyPartTests {
    @Test("visible ASCII, 1 to 255 bytes, no braces; a client ID also no colon")
    func rule() {
        #expect(UserKeyPart.isValidClientID("com.example.app"))
        #expect(UserKeyPart.isValidSubject("001234.5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c.1234"))
        #expect(UserKeyPart.isValidSubject("a:b"))
        #expect(!UserKeyPart.isValidClientID("com.example:app"))
        for braced in ["a{b", "a}b", "{", "}"] {
            #expect(!UserKeyPart.isValidClientID(braced))
            #expect(!UserKeyPart.isValidSubject(braced))
        }
        for bad in ["", "a b", "a\tb", "é", "a\u{7F}"] {
            #expect(!UserKeyPart.isValidClientID(bad))
            #expect(!UserKeyPart.isValidSubject(bad))
        }
        #expect(UserKeyPart.isValidSubject(String(repeating: "s", count: 255)))
        #expect(!UserKeyPart.isValidSubject(String(repeating: "s", count: 256)))
        #expect(UserKeyPart.isValidClientID(String(repeating: "c", count: 255)))
        #expect(!UserKeyPart.isValidClientID(String(repeating: "c", count: 256)))
    }
}
