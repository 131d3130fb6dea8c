import COpenSSL
import COpenSSLShim

/// The `EVP_PKEY` calls the key types share: PEM in and out, RSA components.
enum OpenSSLKey {
    /// A private key from PEM text (PKCS#8 or PKCS#1).
    static func privateKey(pem: String) throws(CryptoError) -> OpaquePointer {
        let text = Array(pem.utf8)
        let parsed: OpaquePointer? = text.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let parsed else { throw CryptoError.fromOpenSSL("not a PEM private key") }
        return parsed
    }

    /// The key as PKCS#8 PEM text.
    static func pem(_ key: OpaquePointer) throws(CryptoError) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw CryptoError.fromOpenSSL("PEM export failed") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1 else {
            throw CryptoError.fromOpenSSL("PEM export failed")
        }
        var data: UnsafeMutablePointer<CChar>?
        let length = siwa_bio_get_mem_data(bio, &data)
        guard length > 0, let data else { throw CryptoError.fromOpenSSL("PEM export failed") }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// The big-endian bytes of an RSA key's modulus (`n`) or public exponent (`e`).
    static func rsaComponent(_ key: OpaquePointer, modulus: Bool) throws(CryptoError) -> [UInt8] {
        var value: OpaquePointer?
        guard EVP_PKEY_get_bn_param(key, modulus ? "n" : "e", &value) == 1, let value else {
            throw CryptoError.fromOpenSSL("RSA component export failed")
        }
        defer { BN_free(value) }
        var out = [UInt8](repeating: 0, count: (Int(BN_num_bits(value)) + 7) / 8)
        let written = out.withUnsafeMutableBufferPointer { BN_bn2bin(value, $0.baseAddress) }
        guard written == out.count, written > 0 else { throw CryptoError.fromOpenSSL("RSA component export failed") }
        return out
    }
}
