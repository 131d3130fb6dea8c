import SIWAJSON

/// Google's keys through its discovery document: a `JWKSFetching` for `JWKSProvider`, so
/// Google's keys get every protection Apple's have (single flight, rate-limited unknown-kid
/// refresh with a bounded wait, a disk copy, an unusable entry never displacing a good key).
///
/// `fetch(url)` reads the `risc-configuration` document at `url`, takes its `issuer` and
/// `jwks_uri` (neither is ever written in the code), fetches the JWKS at `jwks_uri` with the
/// same fetcher (no redirects, capped size), and returns one
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
        guard Self.isAllowedKeySetURI(jwksURI, configurationURL: url) else {
            throw DiscoveryError("the risc-configuration document's jwks_uri is not https")
        }
        let jwks = try Self.object(try fetcher.fetch(jwksURI), "the JWKS named by jwks_uri")
        guard case .array(let keys)? = jwks["keys"] else {
            throw DiscoveryError("the JWKS named by jwks_uri has no \"keys\" array")
        }
        return Array(
            JSONWriter.object([("issuer", .string(issuer)), ("jwks_uri", .string(jwksURI)), ("keys", .array(keys))])
                .utf8)
    }

    /// The fetcher speaks plain http to a loopback host (so an operator may point
    /// `SIWA_GOOGLE_RISC_CONFIGURATION_URL` at a local copy), but the document's `jwks_uri` is
    /// not the operator's choice: whoever controls the document (or an http copy of it) must not
    /// turn a TLS-checked fetch into a plain one to this machine's loopback services. So it is
    /// https, or the very origin (scheme, host and port) the document itself came from.
    static func isAllowedKeySetURI(_ uri: String, configurationURL: String) -> Bool {
        let target = origin(uri)
        return target.hasPrefix("https://") || target == origin(configurationURL)
    }

    /// `scheme://authority` of a URL, lowercased: everything before the path's first `/`.
    private static func origin(_ url: String) -> String {
        let lowered = url.lowercased()
        guard let separator = lowered.range(of: "://") else { return "" }
        let rest = lowered[separator.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        return String(lowered[..<separator.upperBound]) + authority
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
