/// The exit status of every `siwa-endpoint` command: one table, the same meaning in each
/// (docs/operations.md, "Exit status"), in the manner of kubectl and systemctl. A script
/// or a unit can tell "the work failed" from "I called it wrong" from "the deployment did
/// not answer" without knowing which command it ran.
public enum ExitStatus: Int32, Sendable, CaseIterable {
    /// Done: everything asked was done, or the thing checked is good.
    case success = 0
    /// The thing checked is bad, or some of the work was not done (a user refused or
    /// unknown, a delivery failed, a record not found, a responder answering unhealthy).
    case failed = 1
    /// A usage or settings mistake: an unknown option, a bad value, a setting refused
    /// (`configuration_invalid`), Apple refusing our client (`invalid_client`). Nothing
    /// was changed because of it.
    case usage = 2
    /// The deployment did not answer: Redis (or, for `status`, the responder's socket);
    /// `serve --check`: a Redis server's certificate refused, the outage serve would
    /// start into. Rerun once it answers.
    case unreachable = 3
    /// The provider (Apple, Google) refused, or did not confirm, the request the command
    /// exists for (`canary`'s revocation, a `google` call): not a mistake in the call, not
    /// the endpoint's fault.
    case providerRefused = 4
    /// The provider's API did not answer, or answered 429 or 5xx to every try (`google`):
    /// nothing is wrong with the call; run it again later.
    case providerUnavailable = 5
    /// Standard output was closed under the command (`| head`): 128 + SIGPIPE, what a
    /// shell reports for a command a closed pipe ended. Every record written is whole.
    case closedPipe = 141

    /// The row of the documented table: the status and what it means.
    public var meaning: String {
        switch self {
        case .success: "done; the thing checked is good"
        case .failed: "the thing checked is bad, or some of the work was not done"
        case .usage: "a usage or settings mistake (invalid_client included); nothing was changed"
        case .unreachable: "the deployment did not answer: Redis (status: the responder's socket)"
        case .providerRefused: "Apple or Google refused or did not confirm the request (canary, google)"
        case .providerUnavailable: "Google's API did not answer, or answered 429 or 5xx to every try (google)"
        case .closedPipe: "standard output was closed (as by | head); the records written are whole"
        }
    }
}
