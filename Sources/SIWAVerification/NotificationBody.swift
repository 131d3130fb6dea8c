/// The request body: `{"payload": "<JWS>"}`. The token is inside it; handing the
/// whole body to a JWS parser is the classic mistake.
enum NotificationBody {
    static func payload(of body: [UInt8], maximumBytes: Int) throws(VerificationError) -> [UInt8] {
        guard body.count <= maximumBytes else {
            throw VerificationError(.bodyTooLarge, "the body is \(body.count) bytes; the limit is \(maximumBytes)")
        }
        let members = try JSONDocument.body.parseObject(body)
        switch members["payload"] {
        case nil: throw VerificationError(.payloadMissing, "the body has no \"payload\" member")
        case .string(let token)?: return Array(token.utf8)
        case let other?:
            throw VerificationError(.payloadNotString, "\"payload\" is a JSON \(other.typeName), not a string")
        }
    }
}
