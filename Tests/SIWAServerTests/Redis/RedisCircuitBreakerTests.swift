import Foundation
import Glibc
import SIWARedis
import SIWAStore
import SIWASupport
import Synchronization
import Testing

/// The breaker's PINGs (/healthz's while closed, the probes while open) all run on its one
/// long-lived service thread, not on a thread started per call. The PING here is a stand-in
/// that records the thread it ran on and answers as told.
@Suite("Redis circuit breaker: one thread for every PING")
struct RedisCircuitBreakerTests {
    @Test("ten /healthz PINGs and the probes after an opening run on the breaker's own thread")
    func everyPingOnTheServiceThread() {
        let threads = Mutex<Set<UInt>>([])
        let answers = Mutex(true)
        let breaker = RedisCircuitBreaker(retryInterval: .milliseconds(20)) {
            threads.withLock { _ = $0.insert(UInt(pthread_self())) }
            return answers.withLock { $0 } ? nil : RedisError(.connectionFailed, "stand-in: down")
        }
        let services = ServiceGroup()
        services.start(breaker)
        defer { services.stop(until: .now + .seconds(10)) }

        for _ in 0..<10 { #expect(breaker.health(within: .seconds(10)).answers) }
        answers.withLock { $0 = false }
        #expect(!breaker.health(within: .seconds(10)).answers)
        #expect(breaker.isOpen, "a /healthz PING that failed opens the breaker")
        answers.withLock { $0 = true }
        let deadline = ContinuousClock.now + .seconds(10)
        while breaker.isOpen && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(!breaker.isOpen, "a probe found Redis back")
        let used = threads.withLock { $0 }
        #expect(used.count == 1, "PINGs ran on \(used.count) threads")
        #expect(!used.contains(UInt(pthread_self())), "a PING ran on the caller's thread")
    }
}
