import Foundation
import SIWAHTTPS
import SIWAJSON
import SIWAStore

/// The format a destination speaks. Only Standard Webhooks 1.0 today; RFC 8935 push of
/// Security Event Tokens would be one more case.
public enum WebhookFormat: String, Sendable, Equatable {
    case standardWebhooks = "standard-webhooks"
}

/// One destination of the destinations file.
public struct WebhookDestination: Sendable {
    public let name: String
    public let url: String
    let signingKeyFiles: [String]
    /// Read from `signingKeyFiles` at start: a bad file stops the start.
    public let keys: [WebhookSigningKey]
    public let types: Set<String>
    /// nil: every client ID.
    public let clientIDs: Set<String>?
    /// Whether the two email events carry the user's address. Off unless the entry says
    /// `"include_email": true`: an address goes only where it was asked for.
    public let includeEmail: Bool
    public let caFile: String?
    public let allowPrivateAddress: Bool
    public let format: WebhookFormat
    /// One connection kept and reused between calls (default); false: a new one per call.
    public let keepConnection: Bool

    /// Whether this destination takes `event`.
    public func wants(_ event: WebhookEvent) -> Bool {
        types.contains(event.destinationType) && (clientIDs?.contains(event.clientID) ?? true)
    }

    /// The consumer group of this destination, on the events stream and (with
    /// `account-deleted`) on the deletions stream.
    public var group: String { "deliver:" + name }

    /// Whether it takes `account-deleted`, so its group on the deletions stream exists.
    var takesDeletions: Bool { types.contains("account-deleted") }
}

/// The destinations file (`SIWA_WEBHOOK_DESTINATIONS`), read strictly: an unknown member,
/// a wrong type, a bad name or URL or key file is a named error, refused at start.
public enum WebhookDestinationsFile {
    static let members: Set<String> = [
        "name", "url", "signing_key_files", "types", "client_ids", "include_email", "ca_file",
        "allow_private_address", "format", "keep_connection",
    ]
    public static let maximumBytes = 1 << 20

    public static func load(path: String, readKeys: Bool = true) throws(WebhookSettingError) -> [WebhookDestination] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw WebhookSettingError("cannot read the destinations file \(path)")
        }
        guard data.count <= maximumBytes else { throw WebhookSettingError("the destinations file is over 1 MiB") }
        return try parse(Array(data), readKeys: readKeys)
    }

    public static func parse(_ bytes: [UInt8], readKeys: Bool = true) throws(WebhookSettingError)
        -> [WebhookDestination]
    {
        let document: JSONValue
        do {
            document = try StrictJSONParser.parse(bytes)
        } catch {
            throw WebhookSettingError("the destinations file is not JSON (\(error))")
        }
        guard case .object(let top) = document else {
            throw WebhookSettingError("the destinations file is not an object")
        }
        if let stranger = top.keys.sorted().first(where: { $0 != "destinations" }) {
            throw WebhookSettingError("the destinations file has an unknown member \"\(stranger)\"")
        }
        guard case .array(let list)? = top["destinations"] else {
            throw WebhookSettingError("the destinations file needs \"destinations\", an array")
        }
        var destinations: [WebhookDestination] = []
        for (index, item) in list.enumerated() {
            let destination = try parseDestination(item, index: index, readKeys: readKeys)
            guard !destinations.contains(where: { $0.name == destination.name }) else {
                throw WebhookSettingError("destination \(destination.name) is named twice")
            }
            destinations.append(destination)
        }
        return destinations
    }

    static func parseDestination(_ item: JSONValue, index: Int, readKeys: Bool) throws(WebhookSettingError)
        -> WebhookDestination
    {
        guard case .object(let fields) = item else {
            throw WebhookSettingError("destination \(index) is not an object")
        }
        let label = { () -> String in
            if case .string(let name)? = fields["name"] { return "destination \(name)" }
            return "destination \(index)"
        }()
        func fail(_ text: String) -> WebhookSettingError { WebhookSettingError("\(label): \(text)") }
        if let stranger = fields.keys.sorted().first(where: { !members.contains($0) }) {
            throw fail("unknown member \"\(stranger)\"")
        }
        func string(_ member: String) throws(WebhookSettingError) -> String? {
            switch fields[member] {
            case nil: return nil
            case .string(let text)?: return text
            default: throw fail("\"\(member)\" must be a string")
            }
        }
        func strings(_ member: String) throws(WebhookSettingError) -> [String]? {
            switch fields[member] {
            case nil: return nil
            case .array(let items)?:
                var out: [String] = []
                for item in items {
                    guard case .string(let text) = item else { throw fail("\"\(member)\" must be an array of strings") }
                    out.append(text)
                }
                return out
            default: throw fail("\"\(member)\" must be an array of strings")
            }
        }
        func flag(_ member: String, default value: Bool) throws(WebhookSettingError) -> Bool {
            switch fields[member] {
            case nil: return value
            case .bool(let flag)?: return flag
            default: throw fail("\"\(member)\" must be true or false")
            }
        }
        guard let name = try string("name") else { throw fail("\"name\" is required") }
        guard (1...40).contains(name.utf8.count),
            name.utf8.allSatisfy({ (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D })
        else { throw fail("\"name\" must be 1 to 40 of a-z, 0-9 and -") }
        guard let url = try string("url") else { throw fail("\"url\" is required") }
        let allowPrivate = try flag("allow_private_address", default: false)
        do throws(HTTPSFetchError) {
            try HTTPSFetcher.checkURL(url)
        } catch {
            throw fail("\"url\" must be an https URL: \(error.message)")
        }
        if url.lowercased().hasPrefix("http:"), !allowPrivate {
            throw fail("\"url\" must be https (plain http only to a loopback host with allow_private_address)")
        }
        guard let keyFiles = try strings("signing_key_files"), !keyFiles.isEmpty else {
            throw fail("\"signing_key_files\" is required: at least one key file")
        }
        guard keyFiles.count <= 4 else { throw fail("\"signing_key_files\" holds at most 4 keys (a rotation)") }
        var keys: [WebhookSigningKey] = []
        if readKeys {
            for file in keyFiles {
                do throws(WebhookSettingError) {
                    keys.append(try WebhookSigningKey.load(file: file))
                } catch {
                    throw fail(error.message)
                }
            }
        }
        let types = try strings("types") ?? WebhookEvent.types
        guard !types.isEmpty else { throw fail("\"types\" must name at least one type when present") }
        let known = WebhookEvent.types + WebhookEvent.googleTypes
        if let stranger = types.first(where: { !known.contains($0) }) {
            throw fail("\"types\" names \(stranger); the types are \(known.joined(separator: ", "))")
        }
        let clientIDs = try strings("client_ids")
        if let clientIDs, clientIDs.isEmpty {
            throw fail("\"client_ids\" must name at least one client ID when present")
        }
        let caFile = try string("ca_file")
        if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw fail("cannot read ca_file \(caFile)")
        }
        let formatText = try string("format") ?? WebhookFormat.standardWebhooks.rawValue
        guard let format = WebhookFormat(rawValue: formatText) else {
            throw fail("\"format\" must be standard-webhooks, not \(formatText)")
        }
        return WebhookDestination(
            name: name, url: url, signingKeyFiles: keyFiles, keys: keys, types: Set(types),
            clientIDs: clientIDs.map(Set.init), includeEmail: try flag("include_email", default: false), caFile: caFile,
            allowPrivateAddress: allowPrivate, format: format,
            keepConnection: try flag("keep_connection", default: true))
    }
}
