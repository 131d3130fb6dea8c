import Foundation
import SIWAFastCGIClient
import SIWAJSON
import SIWAServer
import SIWAVerification

/// `status`: asks a running responder for its health over its FastCGI socket, as nginx
/// would (`GET /healthz` from loopback), and prints it as a table or as the document.
enum StatusCommand {
    static let help = """
        usage: siwa-endpoint status [--socket PATH] [--env-file FILE] [--json] [--timeout SECONDS]

        Asks a running `siwa-endpoint serve` for its health over its FastCGI socket
        (GET /healthz, the way nginx passes it): whether it is healthy, how many of
        Apple's keys it holds, whether Redis answers, and how many notifications
        wait in its spool. --socket defaults to serve's SIWA_FCGI_SOCKET (a unix socket
        path, or 127.0.0.1:PORT; from the environment and --env-file, the environment
        wins), else /run/siwa-endpoint/fcgi.sock. --json prints the responder's health
        document as it answered it. --timeout: default 5, at most 60.

        Exit status: 0 healthy, 1 answered but not healthy, 2 a usage or settings
        mistake, 3 no answer (nothing listens on the socket, or it does not speak FastCGI).
        """

    static func run(_ words: [String]) throws -> Int32 {
        if words.contains("--help") {
            Output.line(help)
            return 0
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--socket", "--timeout", "--env-file"], flagOptions: ["--json"])
        guard arguments.positionals.isEmpty else { throw UsageError("status takes no positional arguments") }
        let socket: String
        if let given = arguments.value("--socket") {
            socket = given
        } else {
            // Serve's setting, read and checked as serve reads it.
            do throws(ConfigurationError) {
                let settings = try CommandSettings(
                    environment: ProcessInfo.processInfo.environment, envFile: arguments.value("--env-file"))
                _ = try settings[.fastCGISocket]
                OperatorSettings.warnUnknown(settings.unknownSettings)
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
            return 3
        }
        guard case .object(let members)? = try? StrictJSONParser.parse(response.body) else {
            Output.error("siwa-endpoint status: \(socket) answered \(response.status) without a health document")
            return 3
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
            if let reason = document["reason"] { rows.append(("reason", text(reason))) }
            let width = rows.map(\.0.count).max() ?? 0
            for (name, value) in rows {
                Output.line(name.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + value)
            }
        }
        return healthy ? 0 : 1
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
