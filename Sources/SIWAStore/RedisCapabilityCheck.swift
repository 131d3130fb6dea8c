import SIWARedis
import SIWASettingKeys

/// The start-up check of `serve` and `serve --check`: can this Redis, with these
/// credentials, do the endpoint's work? It logs in step by step (AUTH, SELECT), loads the
/// apply script and runs it in its probe mode, which asks Redis (`redis.acl_check_cmd`)
/// whether this user may run each command the script runs, on the keys and channel it
/// writes, and changes nothing; then Google's script the same way (sent with `EVAL`, as the
/// store sends it). It asks `TYPE` of the events stream key (a key of another
/// type refuses every notification), and with `SIWA_REDIS_MIN_REPLICAS` above 0 sends the
/// probe `PUBLISH` (on a channel nobody reads) and a `WAIT 0` that returns at once, so a
/// user without them is refused here, not found out on every write.
///
/// A Redis that refuses (wrong credentials, a missing permission, a database out of
/// range, a script that does not load) is a deployment mistake: `serve` stops. A Redis
/// that does not answer, or answers "not now" (loading, `max number of clients`), is an
/// outage: `serve` starts and spools, as it would during the outage; so is a server
/// certificate the endpoint refuses (`serverCertificateRefused`: a renewal ends it).
public enum RedisCapabilityCheck {
    public enum Result: Sendable, Equatable {
        case ready
        /// Not reachable now, or busy: start anyway. The text says why.
        case unavailable(String)
        /// Reachable, and refuses what the endpoint needs: the text says what is missing.
        case refused(String)
        /// The server's certificate was refused (untrusted, expired, another name): an
        /// outage, as at run time (start anyway and spool); `serve --check` reports it.
        case serverCertificateRefused(ServerCertificateRefusal)
    }

    public static func run(
        endpoint: RedisEndpoint, timeout: Duration, keyPrefix: String, streamMaximumLength: Int,
        minimumReplicas: Int = 0, checksGoogle: Bool = false
    ) -> Result {
        // Logged in by hand, so that each step's refusal is told apart from an outage.
        let bare = RedisEndpoint(address: endpoint.address, tls: endpoint.tls)
        let connection = RedisConnection(endpoint: bare, connectTimeout: timeout, commandTimeout: timeout)
        defer { connection.disconnect() }
        do {
            try connection.connect()
        } catch  where error.code == .tlsRefused {
            // A refused server certificate ends when a good one is back (a renewal): an
            // outage. A TLS file of ours that cannot be used is a setting to fix.
            if let refusal = ServerCertificateRefusal(error) { return .serverCertificateRefused(refusal) }
            return .refused(error.operatorMessage)
        } catch {
            return .unavailable(error.operatorMessage)
        }
        let store = NotificationStore(
            connection: connection, keyPrefix: keyPrefix, streamMaximumLength: streamMaximumLength)
        let probeClient = "siwa-endpoint-start-check"
        let steps: [(what: String, arguments: () -> [String])] = [
            (
                "AUTH (the user name and password in the URL)",
                {
                    endpoint.password.map { ["AUTH"] + (endpoint.username.map { [$0] } ?? []) + [$0] } ?? []
                }
            ),
            (
                "SELECT \(endpoint.database) (the database in the URL)",
                { endpoint.database == 0 ? [] : ["SELECT", String(endpoint.database)] }
            ),
            ("PING", { ["PING"] }),
            ("SCRIPT LOAD of the apply script", { ["SCRIPT", "LOAD", NotificationStore.applyScript] }),
        ]
        var sha = ""
        for step in steps {
            let arguments = step.arguments()
            if arguments.isEmpty { continue }
            do {
                let reply = try connection.command(arguments)
                if arguments[0] == "SCRIPT" { sha = reply.string ?? "" }
            } catch {
                return classify(error, step: step.what)
            }
        }
        do {
            let reply = try connection.command([
                "EVALSHA", sha, "4", store.keys.user(clientID: probeClient, subject: "probe"),
                store.keys.seen(clientID: probeClient, subject: "probe", tokenID: "probe"), store.keys.events,
                store.keys.deletions,
                store.keys.notifications, String(max(1, streamMaximumLength)),
            ])
            guard reply.string == "ready" else {
                return .refused("the apply script's check did not answer \"ready\" (a different script under its SHA?)")
            }
        } catch {
            return classify(error, step: "running the apply script (EVALSHA)")
        }
        // Google's script, sent as the store sends it (EVAL), in its probe mode: a user who may
        // run Apple's script but not Google's would spool every Google token for ever. Only
        // when Google's path is served (`SIWA_GOOGLE_CLIENT_IDS`).
        if checksGoogle {
            do {
                let reply = try connection.command([
                    "EVAL", NotificationStore.securityEventScript, "4", store.keys.googleSeen(tokenID: "probe"),
                    store.keys.events, store.keys.googleUser(clientID: probeClient, subject: "probe"),
                    store.keys.googleVerification(state: "probe"), store.keys.notifications,
                    String(max(1, streamMaximumLength)),
                ])
                guard reply.string == "ready" else {
                    return .refused("Google's security event script's check did not answer \"ready\"")
                }
            } catch {
                return classify(error, step: "running Google's security event script (EVAL)")
            }
        }
        // The shared streams: a key of another type refuses every notification alike.
        for (name, key) in [("events", store.keys.events), ("deletions", store.keys.deletions)] {
            do {
                let type = try connection.command("TYPE", key).string ?? ""
                guard type == "none" || type == "stream" else {
                    return .refused(
                        "the \(name) key \(key) holds a \(type), not a stream: every notification would be "
                            + "refused; delete or rename it (SIWA_KEY_PREFIX names it)")
                }
            } catch {
                return classify(error, step: "TYPE \(key)")
            }
        }
        guard minimumReplicas > 0 else { return .ready }
        let replicaSteps: [(what: String, arguments: [String])] = [
            (
                "PUBLISH on \(store.keys.replicationProbe) (SIWA_REDIS_MIN_REPLICAS)",
                ["PUBLISH", store.keys.replicationProbe, ""]
            ),
            ("WAIT (SIWA_REDIS_MIN_REPLICAS)", ["WAIT", "0", "1"]),
        ]
        for step in replicaSteps {
            do {
                _ = try connection.command(step.arguments)
            } catch {
                return classify(error, step: step.what)
            }
        }
        return .ready
    }

    private static func classify(_ error: RedisError, step: String) -> Result {
        if error.isConnectionError { return .unavailable(error.operatorMessage) }
        let busy = error.isTransient || error.message.hasPrefix("ERR max number of clients")
        if busy { return .unavailable("\(step): \(error.operatorMessage)") }
        let hint = error.reply == .noAuth ? " (Redis requires a password: put it in the URL)" : ""
        return .refused("\(step) refused: \(error.operatorMessage)\(hint)")
    }
}
