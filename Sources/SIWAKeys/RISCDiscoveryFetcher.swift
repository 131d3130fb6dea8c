import SIWAJSON

/// Google's keys through its discovery document: a `JWKSFetching` for `JWKSProvider`, so
/// Google's keys get every protection Apple's have (single flight, rate-limited unknown-kid
/// refresh with a bounded wait, a disk copy, an unusable entry never displacing a good key).
///
/// `fetch(url)` reads the `risc-configuration` document at `url`, takes its `issuer` and
/// `jwks_uri` (neither is ever written in the code), fetches the JWKS at `jwks_uri` with the
/// same fetcher (https only, no redirects, capped size, a public address), and returns one
/// document `{"issuer", "jwks_uri", "keys"}`: the provider parses the keys and the issuer
/// from it and keeps that document in its cache file, so a restart without network knows
/// both.
public struct RISCDiscoveryFetcher: JWKSFetching {
    let fetcher: any JWKSFetching

    public init(fetcher: any JWKSFetching) {
        self.fetcher = fetcher
    }

    public func fetch(_ url: String) throws -> [UInt8] {
        let configuration = try Self.object(try fetcher.fetch(url), "the risc-configuration document")
        guard case .string(let issuer)? = configuration["issuer"], !issuer.isEmpty, issuer.utf8.count <= 256,
            issuer.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else { throw DiscoveryError("the risc-configuration document has no usable issuer") }
        guard case .string(let jwksURI)? = configuration["jwks_uri"], !jwksURI.isEmpty, jwksURI.utf8.count <= 2048
        else { throw DiscoveryError("the risc-configuration document has no jwks_uri") }
        let jwks = try Self.object(try fetcher.fetch(jwksURI), "the JWKS named by jwks_uri")
        guard case .array(let keys)? = jwks["keys"] else {
            throw DiscoveryError("the JWKS named by jwks_uri has no \"keys\" array")
        }
        return Array(
            JSONWriter.object([("issuer", .string(issuer)), ("jwks_uri", .string(jwksURI)), ("keys", .array(keys))])
                .utf8)
    }

    private static func object(_ bytes: [UInt8], _ name: String) throws -> [String: JSONValue] {
        guard case .object(let members)? = try? StrictJSONParser.parse(bytes) else {
            throw DiscoveryError("\(name) is not a JSON object")
        }
        return members
    }

    /// A discovery document that cannot be used; the provider keeps its last good keys.
    public struct DiscoveryError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
