import SIWAJSON

extension NotificationVerifier {
    /// The `aud` a refused body's token claims, read WITHOUT any check (nil when there is
    /// no readable string `aud`). Only for counting refusals by client ID: never a reason
    /// to accept, store or route anything.
    public func unverifiedAudience(of body: [UInt8]) -> String? {
        guard let token = try? NotificationBody.payload(of: body, maximumBytes: maximumBodyBytes),
            let jws = try? CompactJWS(token),
            case .object(let claims)? = try? StrictJSONParser.parse(jws.claims),
            case .string(let audience)? = claims["aud"]
        else { return nil }
        return audience
    }
}
