import SIWAHTTPS

/// How `JWKSProvider` gets the bytes of Apple's JWKS: `HTTPSFetcher` in service, an
/// in-process stand-in in tests of the provider's rate limits.
public protocol JWKSFetching: Sendable {
    /// The body of a 200 response to a GET of `url`, or an error saying why not.
    func fetch(_ url: String) throws -> [UInt8]
}

extension HTTPSFetcher: JWKSFetching {}
