/// What a connection does differently per topology: where it connects, what an error reply
/// says about its node, and how messages name that node. One per connection (it keeps the
/// node the connection is on), made by `RedisLocator.routing()`: the connection itself
/// never asks which topology it has.
protocol RedisRouting: AnyObject {
    /// Connects `connection` to the node, or checks that the node it is on is still the one.
    func connect(_ connection: RedisConnection) throws(RedisError)
    /// Runs one command where this topology sends it.
    func command(_ arguments: [[UInt8]], on connection: RedisConnection) throws(RedisError) -> RedisReply
    /// A keyless command about the previous command's write (`WAIT`), where that write ran.
    func commandAboutLastWrite(_ arguments: [[UInt8]], on connection: RedisConnection) throws(RedisError)
        -> RedisReply
    /// An error reply saying the node is not, or no longer, where to write: the node is
    /// forgotten and the error returned is thrown instead (`connectionLost`); nil otherwise.
    func nodeTrouble(reply text: String, shown: String) -> RedisError?
    /// The connection to the node failed: the locator is told (the next one asks again).
    func connectionFailed()
    /// The node the connection is on (Sentinel's primary, the slot's primary); nil with one Redis.
    var node: RedisNodeAddress? { get }
    /// What messages name the node as; nil: the endpoint.
    var target: String? { get }
}

extension RedisRouting {
    func commandAboutLastWrite(_ arguments: [[UInt8]], on connection: RedisConnection) throws(RedisError)
        -> RedisReply
    {
        try connection.command(arguments)
    }
}

/// One Redis at the URL's address.
final class SingleNodeRouting: RedisRouting {
    func connect(_ connection: RedisConnection) throws(RedisError) {
        guard !connection.ready else { return }
        try connection.open(connection.endpoint.address)
        connection.ready = true
    }

    func command(_ arguments: [[UInt8]], on connection: RedisConnection) throws(RedisError) -> RedisReply {
        try connection.sendHere(arguments)
    }

    func nodeTrouble(reply text: String, shown: String) -> RedisError? { nil }
    func connectionFailed() {}
    var node: RedisNodeAddress? { nil }
    var target: String? { nil }
}
