import SIWARedis
import SIWAStore
import SIWAVerification
import Synchronization

/// An in-process stand-in for the Redis store: answers each apply with a chosen outcome,
/// or fails the way a lost Redis does, and records what it was asked to apply.
final class NotificationStoreDouble: NotificationStoring, Sendable {
    enum Answer: Sendable {
        case outcome(NotificationStore.Outcome, shortfall: Bool = false)
        case down
        /// Redis's refusal, as the real store throws it.
        case refused(RedisError)
    }

    private struct State {
        var answer: Answer = .outcome(.applied)
        /// Answers for one token ID, before `answer`.
        var answers: [String: Answer] = [:]
        var answersPing = true
        var applied: [String] = []
        /// Users (`<client_id>:<sub>`) whose account-deleted the double's Redis holds.
        var deletedUsers: Set<String> = []
    }
    private let state = Mutex(State())

    func answer(_ answer: Answer) { state.withLock { $0.answer = answer } }
    func answer(_ answer: Answer, forTokenID tokenID: String) { state.withLock { $0.answers[tokenID] = answer } }
    func answerPing(_ answers: Bool) { state.withLock { $0.answersPing = answers } }

    /// The jti of every notification it applied, in order.
    var applied: [String] { state.withLock { $0.applied } }

    func applyAcknowledged(
        _ notification: VerifiedNotification, receivedAt: Int64, earlierAttempt: Int64?
    ) throws(RedisError) -> NotificationStore.Acknowledged {
        let answer = state.withLock { $0.answers[notification.tokenID] ?? $0.answer }
        switch answer {
        case .down:
            throw RedisError(.connectionFailed, "Redis does not answer (test double)")
        case .refused(let refusal):
            throw refusal
        case .outcome(let outcome, let shortfall):
            state.withLock { $0.applied.append(notification.tokenID) }
            return NotificationStore.Acknowledged(outcome, replicas: shortfall ? 0 : nil, isShortfall: shortfall)
        }
    }

    /// The double's Redis holds this user's account-deleted from now on.
    func holdAccountDeleted(clientID: String, subject: String) {
        state.withLock { _ = $0.deletedUsers.insert(clientID + ":" + subject) }
    }

    /// Whether `holdAccountDeleted` named the user; fails as a lost Redis while it does not answer PING.
    func isAccountDeleted(clientID: String, subject: String) throws(RedisError) -> Bool {
        let (answers, deleted) = state.withLock { ($0.answersPing, $0.deletedUsers.contains(clientID + ":" + subject)) }
        guard answers else { throw RedisError(.connectionFailed, "Redis does not answer (test double)") }
        return deleted
    }

    func probe() -> RedisError? {
        state.withLock { $0.answersPing } ? nil : RedisError(.connectionFailed, "Redis does not answer (test double)")
    }
}
