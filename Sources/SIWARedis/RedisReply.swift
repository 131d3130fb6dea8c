/// One Redis reply, copied out of hiredis's reply object (which is freed at once).
///
/// Bulk strings stay bytes: Redis values are binary. A top-level error reply is
/// thrown by `RedisConnection` as `RedisError.serverError`; `.error` appears only
/// nested inside an array (for example in a script's table result).
public enum RedisReply: Sendable, Equatable {
    case status(String)
    case error(String)
    case integer(Int64)
    case bulkString([UInt8])
    case null
    case array([RedisReply])

    /// The text of a status or bulk-string reply (bulk bytes decoded as UTF-8).
    public var string: String? {
        switch self {
        case .status(let text): text
        case .bulkString(let bytes): String(decoding: bytes, as: UTF8.self)
        default: nil
        }
    }

    public var integer: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }

    public var array: [RedisReply]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// A flat array of field/value bulk strings (HGETALL, XRANGE entries) as a dictionary.
    public var fieldMap: [String: String]? {
        guard let elements = array, elements.count % 2 == 0 else { return nil }
        var map: [String: String] = [:]
        for index in stride(from: 0, to: elements.count, by: 2) {
            guard let field = elements[index].string, let value = elements[index + 1].string else { return nil }
            map[field] = value
        }
        return map
    }
}
