import Foundation
import SIWAJSON
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWAWebhooks

/// `deliver`: the webhook deliverer (Standard Webhooks 1.0) and its operator commands.
enum DeliverCommand {
    static let help = """
        usage: siwa-endpoint deliver [--env-file FILE]          run the deliverer (SIGTERM stops it)
               siwa-endpoint deliver --check [--env-file FILE]  check the settings and destinations
               siwa-endpoint deliver status [--json]            per destination: pending, oldest, last
                                                                success and failure, disabled
               siwa-endpoint deliver replay --destination NAME --since T [--until T] [--type TYPE] [--json]
               siwa-endpoint deliver test --destination NAME [--json]    send one signed siwa.test event
               siwa-endpoint deliver enable --destination NAME [--json]  re-enable a disabled destination
               siwa-endpoint deliver keygen --scheme ed25519|hmac --out FILE

        Reads the events stream through one consumer group per destination (deliver:NAME)
        and POSTs each event to every destination that takes it, signed as Standard
        Webhooks 1.0 (webhook-id = the notification's jti). Any 2xx is done; the rest is
        retried (immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h, with
        jitter), then kept as failed. 410 disables the destination until `enable`.

        replay: re-sends, once each, the events recorded from --since to --until (T: RFC 3339
        or Unix ms; the time the endpoint recorded the event) that the destination takes, with
        their own webhook-ids. Exit 1 when one was not delivered.
        test: exit 0 on a 2xx, 1 otherwise. --json: status one document; test and enable one
        object; replay one object per event ({"webhook_id","outcome","http_status","cause",
        "type"}), then the counts ({"destination","replayed","delivered","failed"}). keygen: writes a fresh key (mode 0600, the file
        must not exist) and prints the public whpk_ key of an ed25519 one.

        Exit status: 0 done; 1 a delivery (test, replay) failed; 2 a usage or settings
        mistake; 3 Redis did not answer.

        settings (SIWA_* environment variables; the environment wins over --env-file):
        \(WebhookConfiguration.helpLines.joined(separator: "\n"))
          SIWA_REDIS_URL, SIWA_REDIS_TIMEOUT_MS, SIWA_KEY_PREFIX and the Sentinel and Cluster
          settings: as for serve
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        switch words.first {
        case "status": return try status(Array(words.dropFirst()))
        case "replay": return try replay(Array(words.dropFirst()))
        case "test": return try test(Array(words.dropFirst()))
        case "enable": return try enable(Array(words.dropFirst()))
        case "keygen": return try keygen(Array(words.dropFirst()))
        default: break
        }
        let arguments = try CommandLineArguments(words, valueOptions: ["--env-file"], flagOptions: ["--check"])
        guard arguments.positionals.isEmpty else {
            throw UsageError("unknown deliver command \(arguments.positionals[0])")
        }
        guard let configuration = load(arguments) else { return .usage }
        if arguments.has("--check") {
            Output.line(
                "siwa-endpoint deliver: settings and \(configuration.destinations.count) destination(s) are valid: "
                    + configuration.destinations.map(\.name).joined(separator: ", "))
            return .success
        }
        return serve(configuration)
    }

    /// The settings and destinations (key files read); a refusal is serve's one line (nil: exit 2).
    static func load(_ arguments: CommandLineArguments) -> WebhookConfiguration? {
        OperatorSettings.load(WebhookConfiguration.self, envFile: arguments.value("--env-file"))
    }

    static func connection(_ configuration: WebhookConfiguration) -> RedisConnection {
        OperatorSettings.redisConnection(configuration.redis, keyPrefix: configuration.keyPrefix)
    }

    static func poster(_ destination: WebhookDestination, _ configuration: WebhookConfiguration) -> WebhookPoster {
        WebhookPoster(
            destination: destination, connectTimeout: configuration.connectTimeout, timeout: configuration.timeout,
            userAgent: "siwa-endpoint/\(EndpointVersion.current)", keptConnectionIdle: configuration.keepAlive)
    }

    static func serve(_ configuration: WebhookConfiguration) -> ExitStatus {
        let services = ServiceGroup()
        do throws(SignalSetupError) {
            try services.handleSignals()
        } catch {
            EventLog.event("signal_setup_failed", level: "error", [("message", .string(error.description))])
            return .failed
        }
        let parts = DeliverAssembly.build(configuration)
        do throws(WebhookMetricsListener.ListenError) {
            try parts.start(in: services)
        } catch {
            services.stop(until: .now + .seconds(1))
            return ServeCommand.refuse(setting: "SIWA_WEBHOOK_METRICS_LISTEN", message: error.description).exitStatus
        }
        EventLog.event(
            "deliver_started",
            [
                ("destinations", .array(configuration.destinations.map { .string($0.name) })),
                ("consumer", .string(configuration.consumer)), ("pid", .integer(Int64(getpid()))),
                ("metrics", .string("\(configuration.metricsListen.host):\(configuration.metricsListen.port)")),
            ])
        // A POST in flight finishes (bounded by SIWA_WEBHOOK_TIMEOUT_MS) or is abandoned
        // unacknowledged: it is sent again after a restart, with the same webhook-id.
        let stopped = services.run(shutdownTimeout: configuration.timeout + .seconds(2))
        EventLog.event("deliver_stopped", [("all_returned", .bool(stopped.allReturned))])
        return .success
    }

    // MARK: - Operator commands

    static func destination(_ arguments: CommandLineArguments, _ configuration: WebhookConfiguration) throws
        -> WebhookDestination
    {
        guard let name = arguments.value("--destination") else { throw UsageError("--destination NAME is required") }
        guard let destination = configuration.destinations.first(where: { $0.name == name }) else {
            throw UsageError(
                "no destination \(name) in \(configuration.destinationsPath) (there are: "
                    + configuration.destinations.map(\.name).joined(separator: ", ") + ")")
        }
        return destination
    }

    static func redisFailed(_ error: RedisError) -> ExitStatus {
        Output.error("siwa-endpoint deliver: Redis did not answer (\(error.code.rawValue)): \(error.operatorMessage)")
        return .unreachable
    }

    static func status(_ words: [String]) throws -> ExitStatus {
        let arguments = try CommandLineArguments(words, valueOptions: ["--env-file"], flagOptions: ["--json"])
        guard let configuration = load(arguments) else { return .usage }
        let redis = connection(configuration)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var items: [JSONValue] = []
        do throws(RedisError) {
            for destination in configuration.destinations {
                let store = WebhookDeliveryStore(
                    connection: redis, keyPrefix: configuration.keyPrefix, destination: destination.name)
                let backlog = try store.backlog()
                let state = try store.state()
                let age = backlog.oldestAt.map { max(0, now - $0) / 1000 }
                func time(_ field: String) -> JSONValue {
                    state[field].flatMap(Int64.init).map { .string(UTCTime.format(milliseconds: $0)) } ?? .null
                }
                let item: [(String, JSONValue)] = [
                    ("destination", .string(destination.name)), ("pending", .integer(Int64(backlog.pending))),
                    ("oldest_pending_age_seconds", age.map(JSONValue.integer) ?? .null),
                    ("last_success_at", time("last_success_at")), ("last_failure_at", time("last_failure_at")),
                    ("last_failure_cause", state["last_failure_cause"].map(JSONValue.string) ?? .null),
                    (
                        "last_failure_status",
                        state["last_failure_status"].flatMap(Int64.init).map(JSONValue.integer) ?? .null
                    ),
                    ("disabled", .bool(state["disabled"] == "1")),
                    ("disabled_reason", state["disabled_reason"].map(JSONValue.string) ?? .null),
                    ("failed_after_retries", .integer(state["exhausted"].flatMap(Int64.init) ?? 0)),
                ]
                if arguments.has("--json") {
                    items.append(.object(Dictionary(uniqueKeysWithValues: item)))
                } else {
                    let text = item.dropFirst().map { name, value in
                        let shown: String
                        switch value {
                        case .null: shown = "-"
                        case .string(let text): shown = text
                        default: shown = JSONWriter.serialize(value)
                        }
                        return "\(name)=\(shown)"
                    }
                    Output.line("\(destination.name): " + text.joined(separator: " "))
                }
            }
        } catch {
            return redisFailed(error)
        }
        if arguments.has("--json") { Output.json([("destinations", .array(items))]) }
        return .success
    }

    static func enable(_ words: [String]) throws -> ExitStatus {
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file", "--destination"], flagOptions: [CommandLineArguments.json])
        guard let configuration = load(arguments) else { return .usage }
        let destination = try destination(arguments, configuration)
        let store = WebhookDeliveryStore(
            connection: connection(configuration), keyPrefix: configuration.keyPrefix, destination: destination.name)
        do throws(RedisError) {
            let was = try store.enable()
            EventLog.event(
                "webhook_destination_enabled",
                [("destination", .string(destination.name)), ("was_disabled", .bool(was))])
            if arguments.wantsJSON {
                Output.json([("destination", .string(destination.name)), ("was_disabled", .bool(was))])
            } else {
                Output.line("\(destination.name): " + (was ? "enabled" : "was not disabled"))
            }
            return .success
        } catch {
            return redisFailed(error)
        }
    }

    static func test(_ words: [String]) throws -> ExitStatus {
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file", "--destination"], flagOptions: [CommandLineArguments.json])
        guard let configuration = load(arguments) else { return .usage }
        let destination = try destination(arguments, configuration)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let message = try WebhookMessage.test(now: now)
        let outcome = poster(destination, configuration).post(message, timestamp: now / 1000)
        EventLog.event(
            "webhook_test_sent",
            [
                ("destination", .string(destination.name)), ("webhook_id", .string(message.id)),
                ("cause", outcome.cause.map(JSONValue.string) ?? .null),
            ])
        if arguments.wantsJSON {
            Output.json([("destination", .string(destination.name))] + delivery(message, outcome))
            return outcome.cause == nil ? .success : .failed
        }
        switch outcome {
        case .delivered(let status):
            Output.line("\(destination.name): siwa.test \(message.id) delivered, HTTP \(status)")
            return .success
        case .failed(let cause, let status, _):
            Output.line(
                "\(destination.name): siwa.test \(message.id) failed: \(cause)" + (status.map { ", HTTP \($0)" } ?? ""))
            return .failed
        }
    }

    /// One POST's result for `--json`: its webhook-id, the outcome, the HTTP status, the cause.
    static func delivery(_ message: WebhookMessage, _ outcome: WebhookPoster.Outcome) -> [(String, JSONValue)] {
        let status: Int?
        switch outcome {
        case .delivered(let code): status = code
        case .failed(_, let code, _): status = code
        }
        return [
            ("webhook_id", .string(message.id)), ("outcome", .string(outcome.cause == nil ? "delivered" : "failed")),
            ("http_status", status.map { .integer(Int64($0)) } ?? .null),
            ("cause", outcome.cause.map(JSONValue.string) ?? .null),
        ]
    }

    /// T: Unix milliseconds, or RFC 3339.
    static func parseTime(_ text: String, option: String) throws -> Int64 {
        if let milliseconds = Int64(text), milliseconds >= 0 { return milliseconds }
        if let milliseconds = UTCTime.parse(text) { return milliseconds }
        throw UsageError("\(option) must be RFC 3339 (2026-12-05T05:00:00Z) or Unix milliseconds, got \(text)")
    }

    static func replay(_ words: [String]) throws -> ExitStatus {
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file", "--destination", "--since", "--until", "--type"],
            flagOptions: [CommandLineArguments.json])
        guard let sinceText = arguments.value("--since") else { throw UsageError("--since T is required") }
        let since = try parseTime(sinceText, option: "--since")
        let until = try arguments.value("--until").map { try parseTime($0, option: "--until") }
        let knownTypes = WebhookEvent.types + WebhookEvent.googleTypes
        if let type = arguments.value("--type"), !knownTypes.contains(type) {
            throw UsageError("--type must be one of \(knownTypes.joined(separator: ", ")), got \(type)")
        }
        guard let configuration = load(arguments) else { return .usage }
        let destination = try destination(arguments, configuration)
        let store = WebhookDeliveryStore(
            connection: connection(configuration), keyPrefix: configuration.keyPrefix, destination: destination.name)
        let poster = poster(destination, configuration)
        var sent = 0
        var failed = 0
        var start = String(since)
        let end = until.map(String.init) ?? "+"
        do throws(RedisError) {
            // Bounded: pages of 100 entries up to the end of the range.
            pages: for _ in 0..<1_000_000 {
                let entries = try StoreReader(connection: store.connection).entries(
                    of: store.keys.events, from: start, to: end, limit: 100)
                guard let last = entries.last else { break }
                for entry in entries {
                    guard let event = WebhookEvent(entryID: entry.id, fields: entry.fields), destination.wants(event),
                        arguments.value("--type").map({ $0 == event.destinationType }) ?? true
                    else { continue }
                    let email =
                        event.isEmailEvent && destination.includeEmail
                        ? try store.email(clientID: event.clientID, subject: event.subject) : nil
                    let message = WebhookMessage(event: event, email: email)
                    let outcome = poster.post(message, timestamp: Int64(Date().timeIntervalSince1970))
                    sent += 1
                    if arguments.wantsJSON {
                        if outcome.cause != nil { failed += 1 }
                        Output.json(delivery(message, outcome) + [("type", .string(event.destinationType))])
                        continue
                    }
                    switch outcome {
                    case .delivered(let status):
                        Output.line("\(message.id) \(event.destinationType) delivered HTTP \(status)")
                    case .failed(let cause, let status, _):
                        failed += 1
                        Output.line(
                            "\(message.id) \(event.destinationType) failed \(cause)"
                                + (status.map { " HTTP \($0)" } ?? ""))
                    }
                }
                if entries.count < 100 { break pages }
                start = "(" + last.id
            }
        } catch {
            return redisFailed(error)
        }
        EventLog.event(
            "webhook_replayed",
            [
                ("destination", .string(destination.name)), ("sent", .integer(Int64(sent))),
                ("failed", .integer(Int64(failed))),
            ])
        if arguments.wantsJSON {
            Output.json([
                ("destination", .string(destination.name)), ("replayed", .integer(Int64(sent))),
                ("delivered", .integer(Int64(sent - failed))), ("failed", .integer(Int64(failed))),
            ])
        } else {
            Output.line("\(destination.name): replayed \(sent), delivered \(sent - failed), failed \(failed)")
        }
        return failed > 0 ? .failed : .success
    }

    static func keygen(_ words: [String]) throws -> ExitStatus {
        let arguments = try CommandLineArguments(words, valueOptions: ["--scheme", "--out"])
        guard let scheme = arguments.value("--scheme"), scheme == "ed25519" || scheme == "hmac" else {
            throw UsageError("--scheme must be ed25519 or hmac")
        }
        guard let path = arguments.value("--out") else { throw UsageError("--out FILE is required") }
        let line = try WebhookSigningKey.generate(ed25519: scheme == "ed25519")
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            Output.error("siwa-endpoint deliver keygen: cannot create \(path): \(String(cString: strerror(errno)))")
            return .usage
        }
        let bytes = Array((line + "\n").utf8)
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        fchmod(descriptor, 0o600)
        close(descriptor)
        guard written == bytes.count else {
            Output.error("siwa-endpoint deliver keygen: writing \(path) failed")
            return .failed
        }
        if let publicKey = try WebhookSigningKey(text: line).publicKeyText() {
            Output.line(publicKey)
        } else {
            Output.line("\(path): an HMAC secret (whsec_); the receiver needs the same line")
        }
        return .success
    }
}
