import SIWAVerification

/// Where the contract's data lives in Redis, with prefix `P` (default `siwa`): the one
/// spelling of every key and channel name in Swift. `{<client_id>:<sub>}` is a hash tag, so
/// a user's hash, seen markers and reconcile marker share a cluster slot; the parts obey
/// `UserKeyPart`. (The apply script gets its keys passed in.)
public struct RedisKeyLayout: Sendable, Equatable {
    public let prefix: String

    public init(prefix: String = "siwa") {
        self.prefix = prefix
    }

    /// `P:user:{<client_id>:<sub>}`: the user's hash.
    public func user(clientID: String, subject: String) -> String {
        String(decoding: userBytes(clientID: Array(clientID.utf8), subject: Array(subject.utf8)), as: UTF8.self)
    }

    /// `P:seen:{<client_id>:<sub>}:<jti>`: the duplicate marker of one token.
    public func seen(clientID: String, subject: String, tokenID: String) -> String {
        String(
            decoding: seenBytes(
                clientID: Array(clientID.utf8), subject: Array(subject.utf8), tokenID: Array(tokenID.utf8)),
            as: UTF8.self)
    }

    /// `P:reconciled:{<client_id>:<sub>}`: reconcile's marker of a decided check.
    func reconciled(clientID: String, subject: String) -> String {
        String(
            decoding: keyBytes("reconciled", clientID: Array(clientID.utf8), subject: Array(subject.utf8)),
            as: UTF8.self)
    }

    /// `P:transfer:{<client_id>}`: the app transfer's window (`transfer_date`, `closes_at`).
    func transferWindow(clientID: String) -> String {
        prefix + ":transfer:{" + clientID + "}"
    }

    /// `P:transfer-pending:{<client_id>}:<direction>`: the identifiers a transfer run was given
    /// and has not exchanged yet (`export`: the sending team's `sub`s; `import`: transfer
    /// identifiers).
    func transferPending(clientID: String, direction: String) -> String {
        prefix + ":transfer-pending:{" + clientID + "}:" + direction
    }

    /// `P:transfer-from:{<client_id>:<sub>}`: the sending team's record of one exported user.
    func transferFrom(clientID: String, subject: String) -> String {
        String(
            decoding: keyBytes("transfer-from", clientID: Array(clientID.utf8), subject: Array(subject.utf8)),
            as: UTF8.self)
    }

    /// `P:transfer-id:{<client_id>:<transfer_sub>}`: one transfer identifier, resolved to the
    /// recipient team's new `sub` once exchanged.
    public func transferID(clientID: String, transferSubject: String) -> String {
        String(
            decoding: keyBytes("transfer-id", clientID: Array(clientID.utf8), subject: Array(transferSubject.utf8)),
            as: UTF8.self)
    }

    /// `P:google:user:{<client_id>:<sub>}`: a Google account's hash for one OAuth client ID
    /// (never meets Apple's `P:user:` keys).
    public func googleUser(clientID: String, subject: String) -> String {
        String(
            decoding: keyBytes("google:user", clientID: Array(clientID.utf8), subject: Array(subject.utf8)),
            as: UTF8.self)
    }

    /// `P:google:seen:<jti>`: the duplicate marker of one Security Event Token (a `jti` is
    /// unique per token, whatever its audience).
    public func googleSeen(tokenID: String) -> String { prefix + ":google:seen:" + tokenID }

    /// `P:google:verification:<state>`: the arrival of a `verification` event with that `state`.
    public func googleVerification(state: String) -> String { prefix + ":google:verification:" + state }

    /// `P:events`: the stream of accepted notifications.
    public var events: String { prefix + ":events" }

    /// `P:deletions`: the stream of accepted `account-deleted` notifications.
    public var deletions: String { prefix + ":deletions" }

    /// `P:notifications`: the channel of accepted notifications.
    public var notifications: String { prefix + ":notifications" }

    /// `P:clients`: per client ID, the last genuine notification and since when it is
    /// served (the silence figures; not part of the contract).
    public var clients: String { prefix + ":clients" }

    /// `P:replication-probe`: the channel of the probe `PUBLISH` that moves a connection's
    /// replication offset to now (nobody reads it).
    var replicationProbe: String { prefix + ":replication-probe" }

    /// The user key as the bytes Redis receives (the request path builds no `String`).
    func userBytes(clientID: [UInt8], subject: [UInt8]) -> [UInt8] {
        keyBytes("user", clientID: clientID, subject: subject)
    }

    /// The seen marker as the bytes Redis receives.
    func seenBytes(clientID: [UInt8], subject: [UInt8], tokenID: [UInt8]) -> [UInt8] {
        var key = keyBytes("seen", clientID: clientID, subject: subject)
        key.append(UInt8(ascii: ":"))
        key += tokenID
        return key
    }

    /// `P:<kind>:{<client_id>:<sub>}`.
    private func keyBytes(_ kind: String, clientID: [UInt8], subject: [UInt8]) -> [UInt8] {
        var key = Array(prefix.utf8)
        key.reserveCapacity(key.count + kind.utf8.count + clientID.count + subject.count + 8)
        key.append(UInt8(ascii: ":"))
        key += kind.utf8
        key += [UInt8(ascii: ":"), UInt8(ascii: "{")]
        key += clientID
        key.append(UInt8(ascii: ":"))
        key += subject
        key.append(UInt8(ascii: "}"))
        return key
    }
}
