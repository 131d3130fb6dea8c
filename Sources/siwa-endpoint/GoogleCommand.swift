import Foundation
import SIWAGoogleAPI
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWAStore
import SIWASupport
import SIWATelemetry

/// `google register | status | verify | enable | disable`: the stream Google's Cross-Account
/// Protection pushes to this endpoint, managed through the RISC management API with the
/// service account's key. See docs/google.md, "Registering with Google".
enum GoogleCommand {
    static let help = """
        usage: siwa-endpoint google register [--events TYPES] [--json] [--env-file FILE]
               siwa-endpoint google status [--json] [--env-file FILE]
               siwa-endpoint google enable | disable [--json] [--env-file FILE]
               siwa-endpoint google verify [--timeout SECONDS] [--json] [--env-file FILE]

        register  asks Google to push to SIWA_GOOGLE_RECEIVER_URL (POST /v1beta/stream:update,
                  push delivery) every event type (or those of --events, a comma-separated
                  list of short names: \(GoogleManagementEvents.all.map(\.name).joined(separator: ", ")))
        status    shows the stream configuration Google holds (GET /v1beta/stream)
        enable    starts the stream (POST /v1beta/stream/status:update)
        disable   stops it: Google then sends nothing and keeps nothing for later
        verify    asks Google for a verification SET with a fresh random state
                  (POST /v1beta/stream:verify), then waits up to --timeout seconds (default
                  60, 5 to 3600) for the endpoint to verify and record it in Redis: Google's
                  "real notification on demand", proving the whole path. Redis is read first:
                  when it does not answer, nothing is asked of Google.

        The service account's JSON key file (SIWA_GOOGLE_SERVICE_ACCOUNT_FILE) must be a
        regular file owned by the user running the command, mode 0600 or 0400; it signs a
        fresh RS256 JWT for each request. A 5xx or no answer is retried (3 tries); a 429 or
        503 waits its Retry-After, unless Google asks for more than 60 s.

        Exit status:
          \(ExitStatus.success.rawValue)  done (verify: the verification SET arrived)
          \(ExitStatus.failed.rawValue)  verify: Google accepted the request but no SET arrived in time
          \(ExitStatus.usage.rawValue)  a usage or settings mistake, the key file refused
          \(ExitStatus.unreachable.rawValue)  verify: Redis did not answer
          \(ExitStatus.providerRefused.rawValue)  Google refused the request (400, 401, 403, 404)
          \(ExitStatus.providerUnavailable.rawValue)  Google did not answer, or answered 429 or 5xx to every try

        settings (SIWA_* environment variables; the environment wins over --env-file):
        \(GoogleManagementConfiguration.helpLines.joined(separator: "\n"))
          and serve's Redis settings (verify)
        """

    static let actions = ["register", "status", "verify", "enable", "disable"]

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") || words.first == "help" {
            Output.line(help)
            return .success
        }
        guard let action = words.first, actions.contains(action) else {
            throw UsageError(
                "google needs one of \(actions.joined(separator: ", ")); see `siwa-endpoint google --help`")
        }
        let arguments = try CommandLineArguments(
            Array(words.dropFirst()), valueOptions: ["--env-file", "--events", "--timeout"], flagOptions: ["--json"])
        guard arguments.positionals.isEmpty else {
            throw UsageError("google \(action) takes no positional arguments")
        }
        if arguments.value("--events") != nil, action != "register" {
            throw UsageError("--events is an option of google register")
        }
        if arguments.value("--timeout") != nil, action != "verify" {
            throw UsageError("--timeout is an option of google verify")
        }
        var eventTypes = GoogleManagementEvents.all.map(\.uri)
        if let list = arguments.value("--events") {
            let names = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            let (uris, unknown) = GoogleManagementEvents.uris(names)
            if let unknown {
                throw UsageError(
                    "--events: \(unknown) is not an event type (\(GoogleManagementEvents.all.map(\.name).joined(separator: ", ")))"
                )
            }
            guard !uris.isEmpty else { throw UsageError("--events names no event type") }
            eventTypes = uris
        }
        let timeout = try arguments.integer("--timeout") ?? 60
        guard (5...3600).contains(timeout) else { throw UsageError("--timeout must be 5 to 3600 seconds") }

        let configuration: GoogleManagementConfiguration
        do {
            configuration = try GoogleManagementConfiguration(
                environment: ProcessInfo.processInfo.environment, envFile: arguments.value("--env-file"))
        } catch {
            ServeCommand.refuse(error)
            return ExitStatus.usage
        }
        OperatorSettings.warnUnknown(configuration.unknownSettings)
        let key: GoogleServiceAccountKey
        do {
            key = try GoogleServiceAccountKey(contentsOf: configuration.serviceAccountFile)
        } catch {
            Output.error(
                "siwa-endpoint google \(action): \(SettingKey.googleServiceAccountFile.name) refused "
                    + "(\(error.code.rawValue)): \(error.message); nothing was sent to Google")
            return ExitStatus.usage
        }
        let client = GoogleManagementClient(
            apiURL: configuration.apiURL, authorization: GoogleManagementAuthorization(key: key),
            caFile: configuration.caFile,
            onWait: { hold in
                EventLog.event(
                    "google_asked_to_wait", level: "warning",
                    [("seconds", .number(Double(hold.components.seconds)))])
            })
        let run = Run(action: action, client: client, json: arguments.has("--json"))
        switch action {
        case "register":
            guard let receiverURL = configuration.receiverURL else {
                Output.error(
                    "siwa-endpoint google register: \(SettingKey.googleReceiverURL.name) is required: the public "
                        + "https URL of this endpoint's Google location (e.g. https://example.com/google/risc)")
                return ExitStatus.usage
            }
            return run.register(receiverURL: receiverURL, eventTypes: eventTypes)
        case "status": return run.status()
        case "enable": return run.setStatus(enabled: true)
        case "disable": return run.setStatus(enabled: false)
        default:
            let connection = OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix)
            return run.verify(connection: connection, keyPrefix: configuration.keyPrefix, timeout: .seconds(timeout))
        }
    }

    /// One action against Google, printing as text or one JSON document.
    struct Run {
        let action: String
        let client: GoogleManagementClient
        let json: Bool

        /// Says why Google did not do it, and the exit status that says so.
        func failed(_ error: GoogleManagementError) -> ExitStatus {
            Output.error("siwa-endpoint google \(action): \(error.code.rawValue): \(error.message)")
            return ExitStatus(error)
        }

        func register(receiverURL: String, eventTypes: [String]) -> ExitStatus {
            do {
                try client.updateStream(receiverURL: receiverURL, eventTypes: eventTypes)
            } catch {
                return failed(error)
            }
            if json {
                Output.line(
                    JSONWriter.object([
                        ("outcome", .string("registered")), ("url", .string(receiverURL)),
                        ("events_requested", .array(eventTypes.map { .string($0) })),
                    ]))
            } else {
                Output.line(
                    "registered: Google pushes \(eventTypes.map(GoogleManagementEvents.name).joined(separator: ", ")) "
                        + "to \(receiverURL)")
                if !eventTypes.contains(GoogleManagementEvents.riscPrefix + "verification") {
                    Output.line("note: verification is not requested, so `google verify` cannot be answered")
                }
                Output.line("next: `siwa-endpoint google verify` proves that Google's SETs reach this endpoint")
            }
            return ExitStatus.success
        }

        func status() -> ExitStatus {
            let stream: [String: JSONValue]
            do {
                stream = try client.stream()
            } catch {
                return failed(error)
            }
            if json {
                Output.line(JSONWriter.serialize(.object(stream)))
                return ExitStatus.success
            }
            func strings(_ value: JSONValue?) -> [String] {
                guard case .array(let items)? = value else { return [] }
                return items.compactMap {
                    if case .string(let text) = $0 { GoogleManagementClient.printable(text) } else { nil }
                }
            }
            var delivery: [String: JSONValue] = [:]
            if case .object(let members)? = stream["delivery"] { delivery = members }
            func text(_ value: JSONValue?) -> String {
                if case .string(let text)? = value { return GoogleManagementClient.printable(text) }
                return "(none)"
            }
            Output.line("delivery method:  \(text(delivery["delivery_method"]))")
            Output.line("url:              \(text(delivery["url"]))")
            Output.line(
                "events requested: \(strings(stream["events_requested"]).map(GoogleManagementEvents.name).joined(separator: ", "))"
            )
            if stream["events_delivered"] != nil {
                Output.line(
                    "events delivered: \(strings(stream["events_delivered"]).map(GoogleManagementEvents.name).joined(separator: ", "))"
                )
            }
            return ExitStatus.success
        }

        func setStatus(enabled: Bool) -> ExitStatus {
            do {
                try client.updateStatus(enabled: enabled)
            } catch {
                return failed(error)
            }
            let status = enabled ? "enabled" : "disabled"
            if json {
                Output.line(JSONWriter.object([("outcome", .string(status))]))
            } else {
                Output.line(
                    enabled
                        ? "enabled: Google pushes to the registered URL"
                        : "disabled: Google sends nothing and keeps nothing for later")
            }
            return ExitStatus.success
        }

        func verify(connection: RedisConnection, keyPrefix: String, timeout: Duration) -> ExitStatus {
            let state = GoogleVerificationWatch.freshState()
            let watch = GoogleVerificationWatch(connection: connection, keyPrefix: keyPrefix, state: state)
            do {
                _ = try watch.read()
            } catch {
                Output.error(
                    "siwa-endpoint google verify: Redis does not answer (\(error.code.rawValue): \(error.operatorMessage)); "
                        + "nothing was asked of Google")
                return ExitStatus.unreachable
            }
            let requestedAt = Int64(Date().timeIntervalSince1970 * 1000)
            let started = ContinuousClock.now
            do {
                try client.verify(state: state)
            } catch {
                Output.error(
                    "siwa-endpoint google verify: Google refused the request, so no SET was sent: "
                        + "\(error.code.rawValue): \(error.message)")
                return ExitStatus(error)
            }
            if !json {
                Output.line(
                    "Google accepted the request (state \(state)); waiting up to \(timeout.components.seconds) s "
                        + "for its verification SET")
            }
            switch watch.wait(timeout: timeout) {
            case .arrived(let record):
                let receivedAt = record["received_at"].flatMap { Int64($0) }
                var fields: [(String, JSONValue)] = [
                    ("outcome", .string("arrived")), ("state", .string(state)), ("requested_at", .integer(requestedAt)),
                ]
                if let receivedAt {
                    fields.append(("received_at", .integer(receivedAt)))
                    fields.append(("seconds_to_received", .number(Double(max(0, receivedAt - requestedAt)) / 1000)))
                }
                if let clientID = record["client_id"] { fields.append(("client_id", .string(clientID))) }
                if let jti = record["jti"] { fields.append(("jti", .string(jti))) }
                if json {
                    Output.line(JSONWriter.object(fields))
                } else {
                    Output.line(
                        "arrived: the verification SET was verified and recorded "
                            + (receivedAt.map {
                                String(format: "%.2f s", Double(max(0, $0 - requestedAt)) / 1000) + " after the request"
                            }
                                ?? "")
                            + " (seen in Redis after \(String(format: "%.2f", (ContinuousClock.now - started).inSeconds)) s"
                            + (record["client_id"].map { ", client ID \($0)" } ?? "") + ")")
                }
                return ExitStatus.success
            case .redisFailed(let error):
                Output.error(
                    "siwa-endpoint google verify: Redis stopped answering after Google accepted the request "
                        + "(\(error.code.rawValue)); whether the SET arrived is unknown")
                return ExitStatus.unreachable
            case .nothingArrived:
                if json {
                    Output.line(
                        JSONWriter.object([
                            ("outcome", .string("nothing_arrived")), ("state", .string(state)),
                            ("requested_at", .integer(requestedAt)),
                        ]))
                }
                Output.error(
                    """
                    siwa-endpoint google verify: Google accepted the request but no SET arrived within \(timeout.components.seconds) s. Check:
                      - `siwa-endpoint google status`: the URL is this endpoint's Google location, exactly, and verification is requested
                      - that the stream is enabled (`siwa-endpoint google enable`)
                      - that SIWA_GOOGLE_CLIENT_IDS lists the OAuth client IDs of the project (the log names a refused aud)
                      - the certificate and the route from Google to nginx (its access log shows each POST to the location)
                      - the endpoint's own log and `siwa-endpoint status`
                    """)
                return ExitStatus.failed
            }
        }
    }
}

extension ExitStatus {
    /// The table's row for a refusal of the management API: Google refused (4) or did not
    /// answer (5); a key that cannot sign is the caller's mistake (2).
    init(_ error: GoogleManagementError) {
        if error.code == .signingFailed {
            self = .usage
        } else {
            self = error.isRefusal ? .providerRefused : .providerUnavailable
        }
    }
}
