/// A failure with a stable, machine-readable code and a plain message for the log.
/// Errors of one type compare by code: the message carries details (paths, errno).
public protocol CodedError: Error, Sendable, Equatable, CustomStringConvertible {
    associatedtype Code: ErrorCode
    var code: Code { get }
    var message: String { get }
}

extension CodedError {
    public var description: String { "\(code.rawValue): \(message)" }
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
}

/// A stable error code: a struct with static members rather than an enum, so a new
/// code breaks no caller.
public protocol ErrorCode: Hashable, Sendable, CustomStringConvertible {
    var rawValue: String { get }
}

extension ErrorCode {
    public var description: String { rawValue }
}
