/// Moves a non-Sendable value between threads where its holder's lock makes it safe (the
/// responder's pool of stores, the spool replayer's store).
// Unchecked: a store holds a hiredis `redisContext` (not thread safe); each holder hands it
// to one thread at a time, under its own lock.
package struct UnsafeTransfer<Value>: @unchecked Sendable {
    package let value: Value
    package init(_ value: Value) { self.value = value }
}
