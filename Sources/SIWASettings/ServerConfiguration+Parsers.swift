import Foundation
import SIWAFastCGI
import SIWAHTTPS
import SIWAKeys
import SIWARedis
import SIWASettingKeys
import SIWASpool
import SIWAStore
import SIWAVerification

/// The parsers of the table: each turns a setting's text into its value or names the problem.
extension ServerConfiguration {
    @Sendable static func silenceHoursByClient(_ text: String) throws(SettingProblem) -> [String: Int] {
        var hours: [String: Int] = [:]
        for item in text.split(separator: ",") {
            let pair = item.trimmingCharacters(in: .whitespaces)
            guard let equals = pair.lastIndex(of: "="),
                UserKeyPart.isValidClientID(String(pair[..<equals])),
                let value = Int(pair[pair.index(after: equals)...]),
                SilenceSettings.alertHoursRange.contains(value), hours[String(pair[..<equals])] == nil
            else {
                throw SettingProblem(
                    "must be `client_id=hours,...`, each client ID once, hours from \(SilenceSettings.alertHoursRange.lowerBound) to \(SilenceSettings.alertHoursRange.upperBound)"
                )
            }
            hours[String(pair[..<equals])] = value
        }
        return hours
    }

    @Sendable static func clientIDList(_ text: String) throws(SettingProblem) -> Set<String> {
        let list = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard !list.isEmpty, list.allSatisfy(UserKeyPart.isValidClientID) else {
            throw SettingProblem("must be a comma-separated list of client IDs (visible ASCII, no braces or colons)")
        }
        return Set(list)
    }

    /// An https URL (http only to a loopback host), checked with libcurl's URL parser, the
    /// one the fetch uses: the JWKS URL, and reconcile's token URL.
    @Sendable static func httpsURL(_ text: String) throws(SettingProblem) -> String {
        do throws(HTTPSFetchError) {
            try HTTPSFetcher.checkURL(text)
        } catch {
            throw SettingProblem("must be an https URL (http only to a loopback host): \(error.message)")
        }
        return text
    }

    @Sendable static func readableFile(_ text: String) throws(SettingProblem) -> String {
        guard FileManager.default.isReadableFile(atPath: text) else { throw SettingProblem("cannot read \(text)") }
        return text
    }

    @Sendable static func redisEndpoint(_ text: String) throws(SettingProblem) -> RedisEndpoint {
        do throws(RedisError) {
            return try RedisEndpoint(parsing: text)
        } catch {
            throw SettingProblem("is not a usable Redis URL: \(error.message)")
        }
    }

    /// A DNS name or an IP address, as a certificate holds it.
    @Sendable static func tlsServerName(_ text: String) throws(SettingProblem) -> String {
        guard text.utf8.count <= 253,
            text.unicodeScalars.allSatisfy({
                $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-.:".unicodeScalars.contains($0))
            })
        else {
            throw SettingProblem("must be a host name or an IP address (letters, digits, '-', '.', ':')")
        }
        return text
    }

    @Sendable static func yesOrNo(_ text: String) throws(SettingProblem) -> Bool {
        switch text {
        case "yes": return true
        case "no": return false
        default: throw SettingProblem("must be yes or no")
        }
    }

    @Sendable static func listenAddress(_ text: String) throws(SettingProblem) -> FastCGIListenAddress {
        do throws(FastCGIError) {
            return try FastCGIListenAddress.parse(text)
        } catch {
            throw SettingProblem(
                "must be an absolute unix socket path or a loopback 127.0.0.1:PORT / [::1]:PORT: \(error.message)")
        }
    }

    @Sendable static func socketMode(_ text: String) throws(SettingProblem) -> UInt32 {
        guard let mode = UInt32(text, radix: 8), mode <= 0o777 else {
            throw SettingProblem("must be an octal mode such as 0660")
        }
        return mode
    }

    @Sendable static func groupName(_ text: String) throws(SettingProblem) -> String {
        guard !text.contains("\0"), !text.contains("/") else { throw SettingProblem("must be a group name") }
        return text
    }

    @Sendable static func keyPrefix(_ text: String) throws(SettingProblem) -> String {
        let isPlain: (Substring) -> Bool = { part in
            part.unicodeScalars.allSatisfy {
                $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-_.:".unicodeScalars.contains($0))
            }
        }
        // Optionally a hash tag first, `{tag}` (for Redis Cluster: every key in one slot).
        var rest = text[...]
        if text.hasPrefix("{"), let close = text.firstIndex(of: "}") {
            let tag = text[text.index(after: text.startIndex)..<close]
            guard !tag.isEmpty, isPlain(tag) else {
                throw SettingProblem("must hold letters, digits, '-', '_', '.' or ':' inside its hash tag '{...}'")
            }
            rest = text[text.index(after: close)...]
        }
        guard !text.isEmpty, text.count <= 64, isPlain(rest) else {
            throw SettingProblem(
                "must be 1 to 64 letters, digits, '-', '_', '.' or ':', optionally after a hash tag such as {siwa}")
        }
        return text
    }

    /// Whether the prefix begins with a hash tag, so Redis Cluster puts every key in one slot.
    static func isHashTagPrefix(_ prefix: String) -> Bool {
        guard prefix.hasPrefix("{"), let close = prefix.firstIndex(of: "}") else { return false }
        return close > prefix.index(after: prefix.startIndex)
    }

    @Sendable static func notificationPath(_ text: String) throws(SettingProblem) -> String {
        guard text.hasPrefix("/"), !text.contains("?"), !text.contains(" "), text != "/healthz",
            !text.hasPrefix("/healthz/"), text != "/metrics"
        else {
            throw SettingProblem("must be an absolute path other than /healthz, /healthz/... and /metrics")
        }
        return text
    }
}

extension FastCGIListenAddress {
    /// The same address with the unix socket's mode and group (a TCP address has neither).
    func with(mode: UInt32, group: String?) -> FastCGIListenAddress {
        switch self {
        case .unixSocket(let path, _, _): .unixSocket(path: path, mode: mode, group: group)
        case .loopbackTCP: self
        }
    }
}
