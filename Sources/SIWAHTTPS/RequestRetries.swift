import Glibc

/// How one request to a remote API is retried: the loop every caller of Apple's and Google's
/// REST APIs shares, so a `5xx` or a dropped connection is retried the same way everywhere.
///
/// An attempt says whether its answer is final, worth another attempt after the retry delay
/// (`later`: a `5xx`, a timeout, no connection), or a `429` (`throttled`: the caller has
/// already held the next request back for the answer's `Retry-After`). `later` attempts are
/// counted against `attempts`, with a delay that doubles from `retryDelayMilliseconds` (at
/// most a minute); a `throttled` one uses no attempt, but `throttledAttempts` of them in a
/// row end the request with the last answer.
public struct RequestRetries: Sendable {
    public enum Decision: Sendable {
        case final, later, throttled
    }

    public let attempts: Int
    public let retryDelayMilliseconds: Int
    public let throttledAttempts: Int

    public init(attempts: Int, retryDelayMilliseconds: Int, throttledAttempts: Int) {
        self.attempts = max(1, attempts)
        self.retryDelayMilliseconds = max(0, retryDelayMilliseconds)
        self.throttledAttempts = max(1, throttledAttempts)
    }

    /// Runs `attempt` until its answer is final or the attempts are spent; returns the last answer.
    public func run<Answer>(_ attempt: () -> (Answer, retry: Decision)) -> Answer {
        var delay = retryDelayMilliseconds
        var number = 1
        var throttledInARow = 0
        while true {
            let (answer, retry) = attempt()
            switch retry {
            case .final:
                return answer
            case .throttled:
                throttledInARow += 1
                guard throttledInARow < throttledAttempts else { return answer }
            case .later:
                throttledInARow = 0
                guard number < attempts else { return answer }
                usleep(UInt32(min(delay, 60_000)) * 1000)
                delay = min(delay * 2, 60_000)
                number += 1
            }
        }
    }
}
