import COpenSSL
import COpenSSLShim

/// HMAC-SHA256, used only by tests that forge "HS256 with the public key as secret".
public enum HMACSHA256 {
    public static func authenticationCode(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let ok = key.withUnsafeBufferPointer { keyBuffer in
            message.withUnsafeBufferPointer { messageBuffer in
                out.withUnsafeMutableBufferPointer {
                    siwa_hmac_sha256(
                        keyBuffer.baseAddress, keyBuffer.count, messageBuffer.baseAddress,
                        messageBuffer.count, $0.baseAddress)
                }
            }
        }
        precondition(ok == 1, "HMAC-SHA256 failed")
        return out
    }
}
