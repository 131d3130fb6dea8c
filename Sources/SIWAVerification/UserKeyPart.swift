/// What a `client_id` or a `sub` may contain. Both become parts of a user's Redis keys
/// (`P:user:{<client_id>:<sub>}`): visible ASCII without braces (a brace would move the
/// key's hash tag), 1 to 255 bytes; a client ID also without a colon (else two
/// (client, sub) pairs could name the same key). Apple's values never hold them. The one
/// rule the verifier, the settings, the operator commands and the store all check.
/// Bytes, not Characters: what Redis sees is the bytes.
public enum UserKeyPart {
    public static let maximumByteCount = 255

    public static func isValidClientID(_ text: some StringProtocol) -> Bool {
        isValid(text) && !text.utf8.contains(UInt8(ascii: ":"))
    }

    public static func isValidSubject(_ text: some StringProtocol) -> Bool { isValid(text) }

    /// `isValidSubject` on bytes (the verifier's fast path reads a `sub` where it lies).
    static func isValidSubject(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        !bytes.isEmpty && bytes.count <= maximumByteCount && bytes.allSatisfy(isAllowed)
    }

    private static func isValid(_ text: some StringProtocol) -> Bool {
        !text.isEmpty && text.utf8.count <= maximumByteCount && text.utf8.allSatisfy(isAllowed)
    }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        byte > 0x20 && byte < 0x7F && byte != UInt8(ascii: "{") && byte != UInt8(ascii: "}")
    }
}
