import SIWAJSON

/// One user of the `revoke` input: a JSON line `{"client_id": "...", "sub": "...",
/// "refresh_token": "..."}` or with `access_token` instead (a refresh token wins when both
/// are given: revoking it ends the access tokens made from it too). Other members are
/// ignored. A problem is named by a code that never quotes the line.
public struct RevokeLine: Sendable, Equatable {
    public let clientID: String
    public let subject: String
    public let token: String
    public let kind: AppleTokenRevocation.TokenKind

    public init(parsing bytes: [UInt8]) throws(ReconcileLine.Problem) {
        let members = try ReconcileLine.object(bytes)
        (clientID, subject) = try ReconcileLine.user(members)
        if members["refresh_token"] != nil {
            token = try ReconcileLine.token(members, "refresh_token")
            kind = .refreshToken
        } else if members["access_token"] != nil {
            token = try ReconcileLine.token(members, "access_token")
            kind = .accessToken
        } else {
            throw ReconcileLine.Problem(code: "token_missing")
        }
    }
}
