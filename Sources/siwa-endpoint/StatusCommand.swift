import Foundation
import SIWAFastCGIClient
import SIWAJSON
import SIWASettingKeys
import SIWASettings
import SIWASupport
import SIWAVerification

/// `status`: asks a running responder for its health over its FastCGI socket, as nginx
/// would (`GET /healthz` from loopback), and prints it as a table or as the document.
enum StatusCommand {
    static let help = """
        usage: siwa-endpoint status [--socket PATH] [--env-file FILE] [--json] [--timeout SECONDS]

        Asks a running `siwa-endpoint serve` for its health over its FastCGI socket
        (GET /healthz, the way nginx passes it): whether it is healthy, how many of
        Apple's keys it holds, whether Redis answers, how many notifications
        wait in its spool, and per client ID of SIWA_CLIENT_IDS the genuine
        notifications, the last one and the refusals by reason (and refusals of
        Apple-signed notifications for a client ID not listed). --socket defaults to serve's SIWA_FCGI_SOCKET (a unix socket
        path, or 127.0.0.1:PORT; from the environment and --env-file, the environment
        wins), else /run/siwa-endpoint/fcgi.sock. --json prints the responder's health
        document as it answered it. --timeout: default 5, at most 60.

        Exit status: 0 healthy, 1 answered but not healthy, 2 a usage or settings
        mistake, 3 no answer (nothing listens on the socket, or it does not speak FastCGI).
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--socket", "--timeout", "--env-file"], flagOptions: ["--json"])
        guard arguments.positionals.isEmpty else { throw UsageError("status takes no positional arguments") }
        let socket: String
        if let given = arguments.value("--socket") {
            socket = given
        } else {
            // Serve's setting, read and checked as serve reads it.
            guard let settings = OperatorSettings.load(CommandSettings.self, envFile: arguments.value("--env-file"))
            else { return .usage }
            do throws(ConfigurationError) {
                _ = try settings[.fastCGISocket]
                socket = settings.text(of: SettingKey.fastCGISocket)
            } catch {
                return ServeCommand.refuse(error).exitStatus
            }
        }
        let timeout = try arguments.integer("--timeout") ?? 5
        guard (1...60).contains(timeout) else { throw UsageError("--timeout must be 1 to 60 seconds") }
        let endpoint = try parseEndpoint(socket)

        let response: FastCGIClient.Response
        do {
            response = try FastCGIClient(endpoint, timeout: .seconds(timeout)).send(
                params: FastCGIClient.params(method: "GET", uri: "/healthz"))
        } catch {
            Output.error("siwa-endpoint status: no answer on \(socket): \(error)")
            return .unreachable
        }
        guard case .object(let members)? = try? StrictJSONParser.parse(response.body) else {
            Output.error("siwa-endpoint status: \(socket) answered \(response.status) without a health document")
            return .unreachable
        }
        let document = members
        let healthy = response.status == 200 && document["status"] == .string("ok")
        if arguments.has("--json") {
            Output.line(response.bodyText)
        } else {
            var rows: [(String, String)] = [
                ("socket", socket),
                ("health", healthy ? "ok" : "NOT HEALTHY (HTTP \(response.status))"),
                ("keys", text(document["keys"]) + " of Apple's signing keys loaded"),
                ("redis", text(document["redis"])),
                ("spool depth", text(document["spool_depth"]) + " notifications waiting for Redis"),
            ]
            // Served only where SIWA_GOOGLE_CLIENT_IDS is set; it never makes the health NOT ok.
            if case .object(let google)? = document["google"] {
                rows.append(
                    (
                        "google",
                        text(google["status"]) + ", " + text(google["keys"]) + " of Google's signing keys loaded"
                    ))
            }
            if let reason = document["reason"] { rows.append(("reason", text(reason))) }
            printTable(rows)
            // The per-client figures, from /metrics asked the same way, as a second table.
            if let metrics = try? FastCGIClient(endpoint, timeout: .seconds(timeout)).send(
                params: FastCGIClient.params(method: "GET", uri: "/metrics")), metrics.status == 200
            {
                Output.line("")
                printTable(clientRows(metrics.bodyText))
            }
        }
        return healthy ? .success : .failed
    }

    static func printTable(_ rows: [(String, String)]) {
        let width = rows.map(\.0.count).max() ?? 0
        for (name, value) in rows {
            Output.line(name.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + value)
        }
    }

    /// One row per configured client ID (genuine notifications, the last one, the silence
    /// against its threshold, refusals by reason), and one for an `aud` we do not list: read
    /// from the responder's `siwa_client_*` metrics.
    static func clientRows(_ metrics: String) -> [(String, String)] {
        var samples: [String: [String: Double]] = [:]
        var refusals: [String: [String: Int]] = [:]
        for line in metrics.split(separator: "\n") where line.hasPrefix("siwa_client_") {
            guard let brace = line.firstIndex(of: "{"), let close = line.lastIndex(of: "}"),
                let value = Double(line[line.index(after: close)...].trimmingCharacters(in: .whitespaces))
            else { continue }
            let name = String(line[..<brace])
            var labels: [String: String] = [:]
            for pair in line[line.index(after: brace)..<close].split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                guard parts.count == 2 else { continue }
                labels[String(parts[0])] = String(parts[1].dropFirst().dropLast())
            }
            guard let client = labels["client_id"] else { continue }
            if name == "siwa_client_refusals_total", let reason = labels["reason"] {
                refusals[client, default: [:]][reason] = Int(value)
            } else {
                samples[client, default: [:]][name] = value
            }
        }
        var rows: [(String, String)] = []
        for (clientID, figures) in samples.sorted(by: { $0.key < $1.key }) {
            let genuine = Int(figures["siwa_client_notifications_total"] ?? 0)
            let silence = Int64(figures["siwa_client_silence_seconds"] ?? 0)
            let threshold = Int64(figures["siwa_client_silence_alert_seconds"] ?? 0)
            var detail = "\(genuine) genuine since start; "
            if let last = figures["siwa_client_last_notification_timestamp_seconds"] {
                let lastAt = UTCTime.format(milliseconds: Int64(last.rounded(.down)) * 1000)
                detail += "last \(lastAt) (\(duration(silence)) ago)"
            } else {
                detail += "none yet (served for \(duration(silence)))"
            }
            if threshold > 0 {
                detail +=
                    silence > threshold
                    ? "; SILENT longer than \(duration(threshold))" : "; alert after \(duration(threshold))"
            }
            let refused = (refusals[clientID] ?? [:]).filter { $0.value > 0 }.sorted { $0.key < $1.key }
            detail +=
                "; refused: "
                + (refused.isEmpty ? "none" : refused.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            rows.append(("client " + clientID, detail))
        }
        let unlisted = refusals["unlisted"]?["aud"] ?? 0
        rows.append(
            (
                "aud not listed",
                unlisted == 0
                    ? "0 Apple-signed notifications refused for a client ID not in SIWA_CLIENT_IDS"
                    : "\(unlisted) Apple-signed notifications REFUSED for a client ID not in SIWA_CLIENT_IDS (a Services ID missing there? the log's aud_not_served lines name it)"
            ))
        return rows
    }

    /// `40 s`, `5 min`, `5 h 2 min`, `3 d 4 h`.
    static func duration(_ seconds: Int64) -> String {
        switch seconds {
        case ..<120: "\(seconds) s"
        case ..<7200: "\(seconds / 60) min"
        case ..<172_800: "\(seconds / 3600) h \(seconds % 3600 / 60) min"
        default: "\(seconds / 86_400) d \(seconds % 86_400 / 3600) h"
        }
    }

    static func text(_ value: JSONValue?) -> String {
        switch value {
        case .string(let text): text
        case .integer(let number): String(number)
        case .bool(let flag): String(flag)
        case nil: "(not reported)"
        default: "?"
        }
    }

    /// A unix socket path, or a loopback `127.0.0.1:PORT` / `[::1]:PORT`, as serve listens.
    static func parseEndpoint(_ socket: String) throws(UsageError) -> FastCGIClient.Endpoint {
        if socket.hasPrefix("/") { return .unixSocket(socket) }
        guard let colon = socket.lastIndex(of: ":"), let port = UInt16(socket[socket.index(after: colon)...]),
            port > 0
        else { throw UsageError("--socket must be a unix socket path or 127.0.0.1:PORT, got \(socket)") }
        var host = String(socket[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return .tcp(host: host, port: port)
    }
}
