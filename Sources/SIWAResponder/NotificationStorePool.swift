import SIWARedis
import SIWAStore
import SIWASupport
import Synchronization

/// One `NotificationStore` (and so one Redis connection) per concurrent request (any
/// `NotificationStoring`: tests pass in-process stand-ins).
///
/// A `RedisConnection` is not thread safe; the pool hands each request a store of its
/// own and takes it back after. Sized to the worker count, a request never waits.
public final class NotificationStorePool: Sendable {
    private let idle: Mutex<[UnsafeTransfer<any NotificationStoring>]>
    private let makeStore: @Sendable () -> any NotificationStoring

    public init(makeStore: @escaping @Sendable () -> any NotificationStoring) {
        self.makeStore = makeStore
        idle = Mutex([])
    }

    /// Runs `body` with a store nobody else is using.
    public func withStore<Result>(_ body: (any NotificationStoring) throws(RedisError) -> Result) throws(RedisError)
        -> Result
    {
        let store = idle.withLock { $0.popLast()?.value } ?? makeStore()
        defer { idle.withLock { $0.append(UnsafeTransfer(store)) } }
        return try body(store)
    }
}
