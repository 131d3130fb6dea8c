/// The event types a stream can ask Google for (Google's Cross-Account Protection page and
/// OpenID RISC / OAuth Event Types 1.0), by the short name the commands and the contract use.
public enum GoogleManagementEvents {
    public static let riscPrefix = "https://schemas.openid.net/secevent/risc/event-type/"
    public static let oauthPrefix = "https://schemas.openid.net/secevent/oauth/event-type/"
    /// The push delivery method (RFC 8935), the only one the endpoint receives.
    public static let pushDeliveryMethod = "https://schemas.openid.net/secevent/risc/delivery-method/push"

    /// Every type, in the order `google register` asks for them.
    public static let all: [(name: String, uri: String)] = [
        ("sessions-revoked", riscPrefix + "sessions-revoked"),
        ("tokens-revoked", oauthPrefix + "tokens-revoked"),
        ("token-revoked", oauthPrefix + "token-revoked"),
        ("account-disabled", riscPrefix + "account-disabled"),
        ("account-enabled", riscPrefix + "account-enabled"),
        ("account-credential-change-required", riscPrefix + "account-credential-change-required"),
        ("verification", riscPrefix + "verification"),
    ]

    /// The URIs of `names` (short names or the URIs themselves), in `all`'s order; nil when one
    /// is not a known type, with that one.
    public static func uris(_ names: [String]) -> (uris: [String], unknown: String?) {
        for name in names where !all.contains(where: { $0.name == name || $0.uri == name }) {
            return ([], name)
        }
        return (all.filter { type in names.contains { $0 == type.name || $0 == type.uri } }.map(\.uri), nil)
    }

    /// The short name of `uri`, or the URI itself when it is not a known type.
    public static func name(_ uri: String) -> String {
        all.first { $0.uri == uri }?.name ?? uri
    }
}
