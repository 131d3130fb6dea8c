/// What a run of the Apple commands needs of their settings, read by the command (from
/// `AppleAPIConfiguration`) and handed in: the team, the endpoints its lines name, and
/// the store's key prefix and stream length. The clients themselves are handed in beside it.
public struct AppleRunSettings: Sendable {
    let teamID: String
    let tokenURL: String
    let revokeURL: String
    let migrationURL: String
    let keyPrefix: String
    let streamMaximumLength: Int

    public init(
        teamID: String, tokenURL: String, revokeURL: String, migrationURL: String, keyPrefix: String,
        streamMaximumLength: Int
    ) {
        self.teamID = teamID
        self.tokenURL = tokenURL
        self.revokeURL = revokeURL
        self.migrationURL = migrationURL
        self.keyPrefix = keyPrefix
        self.streamMaximumLength = streamMaximumLength
    }
}
