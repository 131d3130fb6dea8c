import COpenSSL

/// HMAC-SHA256: the webhook signatures of Standard Webhooks' symmetric scheme (`v1`), and the
/// tests that forge "HS256 with the public key as secret".
public enum HMACSHA256 {
    public static func authenticationCode(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let ok = key.withUnsafeBufferPointer { keyBuffer in
            message.withUnsafeBufferPointer { messageBuffer in
                out.withUnsafeMutableBufferPointer {
                    var length: UInt32 = 32
                    return HMAC(
                        EVP_sha256(), keyBuffer.baseAddress, Int32(keyBuffer.count), messageBuffer.baseAddress,
                        messageBuffer.count, $0.baseAddress, &length) != nil
                }
            }
        }
        precondition(ok, "HMAC-SHA256 failed")
        return out
    }
}
