import Dispatch
import Synchronization

/// A door that opens once and stays open: any number of threads wait for it, each until a
/// deadline on the monotonic clock (a stop was asked for, the last worker has left).
public final class Latch: Sendable {
    private let isOpen = Mutex(false)
    /// Signalled once when the latch opens; each waiter it wakes signals it again for the next.
    private let opened = DispatchSemaphore(value: 0)

    public init() {}

    /// Opens the latch; a second call does nothing.
    public func open() {
        let first = isOpen.withLock { open -> Bool in
            defer { open = true }
            return !open
        }
        if first { opened.signal() }
    }

    /// Whether the latch is open.
    public var hasOpened: Bool { isOpen.withLock { $0 } }

    /// Waits until the latch opens, or until `deadline` (nil: no deadline). True once open.
    @discardableResult
    public func wait(until deadline: ContinuousClock.Instant? = nil) -> Bool {
        if hasOpened { return true }
        guard opened.wait(timeout: deadline.map(Self.dispatchTime) ?? .distantFuture) == .success else {
            return hasOpened
        }
        opened.signal()
        return true
    }

    /// `deadline` as a DispatchTime, which counts on a monotonic clock too.
    static func dispatchTime(_ deadline: ContinuousClock.Instant) -> DispatchTime {
        let left = deadline - ContinuousClock.now
        guard left > .zero else { return .now() }
        guard let nanoseconds = left.wholeNanoseconds else { return .distantFuture }
        return .now() + .nanoseconds(Int(nanoseconds))
    }
}
