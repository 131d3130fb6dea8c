/// A failure inside OpenSSL, with a plain message.
public struct CryptoError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}
