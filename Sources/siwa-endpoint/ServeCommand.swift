import Foundation
import SIWAFastCGI
import SIWAHTTPS
import SIWAKeys
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWASpool
import SIWAStore
import SIWASupport
import SIWATelemetry
import SIWAVerification

#if canImport(Glibc)
    import Glibc
#endif

/// `serve`: the FastCGI responder. Settings come from `SIWA_*` environment variables
/// and, optionally, an env file; a bad value stops it with a message naming the setting.
enum ServeCommand {
    static let help = """
        usage: siwa-endpoint serve [--env-file FILE] [--check [--offline]]

        Runs the FastCGI responder behind nginx. Settings are SIWA_* environment
        variables (the environment wins over --env-file). --check runs serve's own
        start-up up to, not including, listening (the settings, this machine, the
        sentinels, Redis, the spool, read only, and the FastCGI settings) and exits;
        with --offline it touches no network (no sentinel, cluster node or Redis is
        asked). SIGTERM or SIGINT: stop accepting, finish requests in flight, exit 0.

        settings:
        \(ServerConfiguration.settings.map { "  \($0.name) (default: \($0.defaultValue ?? "required")): \($0.meaning)" }.joined(separator: "\n"))
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(
            words, valueOptions: ["--env-file"], flagOptions: ["--check", "--offline"])
        guard arguments.positionals.isEmpty else { throw UsageError("serve takes no positional arguments") }
        let checkOnly = arguments.has("--check")
        let offline = arguments.has("--offline")
        guard checkOnly || !offline else { throw UsageError("--offline goes with --check") }

        guard let configuration = loadConfiguration(envFile: arguments.value("--env-file")) else { return .usage }
        let redis: RedisAtStart
        if offline {
            redis = RedisAtStart(locator: .single, certificateRefusal: nil)
            if let refusal = readSpool(configuration) { return refusal.exitStatus }
        } else {
            switch startChecks(configuration, readingSpool: checkOnly) {
            case .success(let found): redis = found
            case .failure(let refused): return refused.exitStatus
            }
        }
        // The FastCGI settings as serve builds its server from them (nothing is opened).
        do throws(ConfigurationError) {
            _ = try ServeAssembly.fastCGIServerConfiguration(configuration)
        } catch {
            refuse(error)
            return .usage
        }
        if checkOnly {
            // A refused server certificate: the settings are valid, but serve would start into
            // an outage (its `redis_tls_refused` line is above). A finding of its own.
            if redis.certificateRefusal != nil { return certificateRefusedStatus }
            // Whose view of the files was checked: the unit runs as its own user, so a
            // check run as root can pass where the service's cannot read.
            let checker = getpwuid(geteuid()).map { String(cString: $0.pointee.pw_name) } ?? "uid \(geteuid())"
            Output.write(
                String(
                    decoding: EventLog.eventLine("configuration_valid", [("checked_as", .string(checker))]),
                    as: UTF8.self))
            return .success
        }
        return serve(configuration, redisAtStart: redis)
    }

    /// Where serve's Redis was found at start: the topology's locator, built once and asked
    /// once (`.single` for one Redis at `SIWA_REDIS_URL`), handed to every part that talks to
    /// Redis or reports on it.
    struct RedisAtStart {
        let locator: RedisLocator
        /// A server (or sentinel) certificate refused at start: serve starts anyway (an
        /// outage: it spools, /healthz says 503), `serve --check` exits
        /// `certificateRefusedStatus`.
        let certificateRefusal: ServerCertificateRefusal?
    }

    /// `serve --check`'s exit status when every setting is valid but a Redis server's (or a
    /// sentinel's) certificate is refused: not 2 (nothing in the settings need be wrong: a
    /// renewal ends it), not 0 (serve would start into an outage).
    static let certificateRefusedStatus: ExitStatus = .unreachable

    /// The start-up checks `serve` and `serve --check` both run, after the settings: the
    /// sentinels or cluster nodes (`locateAtStart`), what Redis lets this user do, and the spool as
    /// serve opens it (read only: `--check` creates and changes nothing there). A refusal
    /// is logged (one `configuration_invalid` line) and given as the exit status.
    /// `readingSpool` is false for serve, which opens the spool a moment later and refuses
    /// with the same line (`spoolRefusal`): a long spool is not read twice before serving.
    static func startChecks(
        _ configuration: ServerConfiguration, readingSpool: Bool
    ) -> Result<RedisAtStart, StartRefused> {
        let locator: RedisLocator
        var certificateRefusal: ServerCertificateRefusal?
        switch locateAtStart(configuration) {
        case .success(let found): (locator, certificateRefusal) = found
        case .failure(let refused): return .failure(refused)
        }
        switch checkRedis(configuration, at: locator.dataEndpoint(configuration.redis.endpoint)) {
        case .usable: break
        case .refused(let refusal): return .failure(refuse(setting: SettingKey.redisURL.name, message: refusal))
        case .certificateRefused(let refusal): certificateRefusal = certificateRefusal ?? refusal
        }
        // One line about it, from serve and --check alike: the reason and the setting to look at.
        certificateRefusal?.log(when: "start")
        let found = RedisAtStart(locator: locator, certificateRefusal: certificateRefusal)
        guard readingSpool else { return .success(found) }
        if let refusal = readSpool(configuration) { return .failure(refusal) }
        return .success(found)
    }

    /// What opening the spool reads (the replay position, the waiting segments), updates
    /// (the position) and settles (the leftovers of `rejected/`), read only: a position serve
    /// could not read or update, or a leftover it could not settle, stops both the same way.
    /// Nil when it would open.
    static func readSpool(_ configuration: ServerConfiguration) -> StartRefused? {
        do throws(SpoolError) {
            _ = try SpoolInspector.status(spoolDirectory: configuration.spool.directory)
            try NotificationSpool.checkOpening(directory: configuration.spool.directory)
            return nil
        } catch {
            return refuse(spoolRefusal(error))
        }
    }

    /// The refusal of a spool that cannot be opened, the same from the check and the opening.
    static func spoolRefusal(_ error: SpoolError) -> ConfigurationError {
        ConfigurationError(SettingKey.spoolDirectory, "cannot be opened: \(error)")
    }

    /// The one validation path of `serve` and `serve --check`: the settings table, then the
    /// checks against this machine. A refusal is one `configuration_invalid` line naming the
    /// setting; nil then, and the caller exits 2.
    static func loadConfiguration(envFile: String?) -> ServerConfiguration? {
        guard let configuration = OperatorSettings.load(ServerConfiguration.self, envFile: envFile) else { return nil }
        do throws(ConfigurationError) {
            try configuration.checkHost()
            return configuration
        } catch {
            refuse(error)
            return nil
        }
    }

    /// The one writer of a start-up refusal of `serve` and `serve --check`: one
    /// `configuration_invalid` JSON line on standard error, nothing else (no plain-text line
    /// beside it), so the journal and `--check` show the same. The exit status to return.
    @discardableResult
    static func refuse(setting: String, message: String) -> StartRefused {
        EventLog.event(
            "configuration_invalid", level: "error", [("setting", .string(setting)), ("message", .string(message))])
        return StartRefused(exitStatus: .usage)
    }

    /// A setting refused by the table or the host checks: its message begins with its name.
    @discardableResult
    static func refuse(_ error: ConfigurationError) -> StartRefused {
        refuse(setting: error.setting, message: error.description)
    }

    /// Serves until SIGTERM or SIGINT: the graph built by `ServeAssembly`, then its services
    /// started in order (see `ServeAssembly` for why this order), then one stop for all.
    static func serve(_ configuration: ServerConfiguration, redisAtStart: RedisAtStart) -> ExitStatus {
        let parts: ServeAssembly
        do throws(ConfigurationError) {
            parts = try ServeAssembly.build(configuration, redisAtStart: redisAtStart)
        } catch {
            return refuse(error).exitStatus
        }
        let fastCGI = configuration.fastCGI
        let services = ServiceGroup()
        do throws(SignalSetupError) {
            // The one place signals are handled, before any service starts.
            try services.handleSignals(onHangUp: { reloadKeys(parts.keys) })
        } catch {
            EventLog.event("signal_setup_failed", level: "error", [("message", .string(error.description))])
            return .failed
        }
        warnIfBacklogCapped(Int(fastCGI.server.backlog))
        do throws(FastCGIError) {
            try parts.start(in: services)
        } catch {
            // The socket could not be made (in use, a permission, a group): named, before `started`.
            services.stop(until: ContinuousClock.now + fastCGI.server.shutdownTimeout)
            let setting =
                error.code == .unknownGroup ? SettingKey.fastCGISocketGroup.name : SettingKey.fastCGISocket.name
            return refuse(ConfigurationError(setting: setting, "cannot be listened on: \(error)")).exitStatus
        }
        EventLog.event(
            "started",
            [
                ("socket", .string(fastCGI.socket)), ("workers", .integer(Int64(fastCGI.server.workerCount))),
                ("client_ids", .array(configuration.clientIDs.sorted().map { .string($0) })),
                ("notification_path", .string(configuration.requests.notificationPath)),
                ("pid", .integer(Int64(getpid()))),
            ])
        // One shutdown deadline (SIGTERM + SIWA_SHUTDOWN_TIMEOUT_SECONDS, monotonic) for the
        // drain and the services together, below the unit's TimeoutStopSec (20 s against
        // the default 10 s).
        let stopped = services.run(shutdownTimeout: fastCGI.server.shutdownTimeout) { cause, _ in
            if case .serviceReturned(let name) = cause {
                EventLog.event("service_returned_early", level: "error", [("service", .string(name))])
            }
            // Said at once, so a rollout's reader sees the stop begin (and what the spool
            // still holds: the next start of this slot replays it).
            EventLog.event(
                "stopping",
                [
                    ("timeout_seconds", .integer(fastCGI.server.shutdownTimeout.wholeSeconds)),
                    ("spool_depth", .integer(Int64(parts.spool.depth))),
                ])
        }
        let drained = parts.server.hasDrained
        EventLog.event("stopped", level: drained ? "info" : "warning", [("drained", .bool(drained))])
        if case .serviceReturned = stopped.cause { return .failed }
        return .success
    }

    /// SIGHUP: the JWKS cache file is read again (an operator may have put keys there);
    /// nothing else is re-read, and nothing stops.
    static func reloadKeys(_ keys: JWKSProvider) {
        let (count, failure) = keys.reloadCacheFile()
        EventLog.event(
            "jwks_cache_reloaded", level: failure == nil ? "info" : "warning",
            [
                ("signal", .string("SIGHUP")), ("keys", .integer(Int64(count))),
                ("failure", failure.map { .string($0.description) } ?? .null),
            ])
    }

    /// The kernel silently caps a listen backlog at net.core.somaxconn: say so at start.
    static func warnIfBacklogCapped(_ backlog: Int) {
        guard let text = try? String(contentsOfFile: "/proc/sys/net/core/somaxconn", encoding: .utf8),
            let limit = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), limit < backlog
        else { return }
        EventLog.event(
            "fcgi_backlog_capped", level: "warning",
            [
                ("setting", .string(SettingKey.fastCGIBacklog.name)), ("backlog", .integer(Int64(backlog))),
                ("somaxconn", .integer(Int64(limit))),
            ])
    }

    /// What the start-up check of Redis found.
    enum RedisCheck {
        /// Ready, or an outage (unreachable, busy): start and spool.
        case usable
        /// Redis refuses what the endpoint needs: a setting to fix (exit 2, naming `SIWA_REDIS_URL`).
        case refused(String)
        /// The server's certificate was refused: an outage at start as at run time.
        case certificateRefused(ServerCertificateRefusal)
    }

    /// Whether Redis at `endpoint` can do the endpoint's work (see `RedisCapabilityCheck`): a
    /// refusal to stop with, a refused certificate (start, as in an outage), or usable (a
    /// Redis that is only unreachable is an outage: spool). `endpoint` is the data node
    /// (`RedisLocator.dataEndpoint`); nil, no primary known yet: an outage, reported by
    /// /healthz, and serve spools.
    static func checkRedis(_ configuration: ServerConfiguration, at endpoint: RedisEndpoint?) -> RedisCheck {
        guard let endpoint else { return .usable }
        let result = RedisCapabilityCheck.run(
            endpoint: endpoint, timeout: configuration.redis.timeout,
            keyPrefix: configuration.store.keyPrefix, streamMaximumLength: configuration.store.streamMaximumLength,
            minimumReplicas: configuration.redis.minimumReplicas, checksGoogle: configuration.google.isServed)
        switch result {
        case .ready: return .usable
        case .unavailable(let why):
            EventLog.event("redis_unavailable_at_start", level: "warning", [("reason", .string(why))])
            return .usable
        case .refused(let what): return .refused("cannot be used for the endpoint's work: \(what)")
        case .serverCertificateRefused(let refusal): return .certificateRefused(refusal)
        }
    }
}
