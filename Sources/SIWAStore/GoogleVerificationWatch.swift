import Foundation
import SIWARedis
import SIWASupport

/// Watches Redis for the verification SET `google verify` asked Google for: the receiver
/// writes `P:google:verification:<state>` (`received_at`, `jti`, `client_id`, `event_time`;
/// kept 7 days) when a `verification` SET carrying that `state` is verified and applied.
public struct GoogleVerificationWatch {
    /// How often Redis is read while waiting.
    public static let pollInterval: Duration = .milliseconds(250)

    public let connection: RedisConnection
    public let key: String

    public init(connection: RedisConnection, keyPrefix: String, state: String) {
        self.connection = connection
        key = Self.key(prefix: keyPrefix, state: state)
    }

    /// `P:google:verification:<state>`.
    public static func key(prefix: String, state: String) -> String {
        prefix + ":google:verification:" + state
    }

    /// A fresh `state`: 128 random bits in hex, from the system's secure generator, so a
    /// SET for another run (or one forged with a guessed state) cannot be taken for this one.
    public static func freshState() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<16).map { _ in
            let byte = UInt8.random(in: 0...255, using: &generator)
            return String(byte, radix: 16).count == 1 ? "0" + String(byte, radix: 16) : String(byte, radix: 16)
        }.joined()
    }

    /// The verification record now, empty when none has arrived.
    public func read() throws(RedisError) -> [String: String] {
        try StoreReader(connection: connection).hash(key)
    }

    /// How the wait ended.
    public enum Outcome: Equatable {
        case arrived([String: String])
        case nothingArrived
        /// Redis never answered during the wait (the last error).
        case redisFailed(RedisError)
    }

    /// Reads every `pollInterval` until the record is there or `timeout` has passed; a Redis
    /// error during the wait is retried at the next turn (serve may be failing over).
    public func wait(timeout: Duration) -> Outcome {
        let deadline = ContinuousClock.now + timeout
        var lastError: RedisError?
        var everRead = false
        // Bounded by the deadline and by a count, whichever comes first.
        let turns = Int(timeout / Self.pollInterval) + 2
        for _ in 0..<turns {
            do {
                let record = try read()
                everRead = true
                if !record.isEmpty { return .arrived(record) }
            } catch {
                lastError = error
            }
            if ContinuousClock.now >= deadline { break }
            Thread.sleep(forTimeInterval: Self.pollInterval.inSeconds)
        }
        if let lastError, !everRead { return .redisFailed(lastError) }
        return .nothingArrived
    }
}
