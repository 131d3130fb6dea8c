import SIWARedis
import SIWAServer

/// A start that did not get far enough to serve: the exit status to return.
struct StartRefused: Error {
    let exitStatus: Int32
}

extension ServeCommand {
    /// With `SIWA_REDIS_SENTINELS`: asks the sentinels once before serving. Sentinels that do
    /// not answer are no reason to refuse to start (notifications are spooled meanwhile, and
    /// /healthz says 503); sentinels that answer "no such master" or refuse the password
    /// are a setting to fix, so serve stops with a message naming it (exit status 2).
    static func locatePrimaryAtStart(_ configuration: ServerConfiguration) -> Result<
        RedisPrimaryLocator?, StartRefused
    > {
        guard let sentinel = configuration.redis.sentinel else { return .success(nil) }
        let master = sentinel.masterName
        let locator = RedisPrimaryLocator(
            sentinels: sentinel.sentinels, masterName: master, sentinelPassword: sentinel.password,
            timeout: configuration.redis.timeout, sentinelTLS: sentinel.tls)
        do {
            let primary = try locator.discover()
            EventLog.event(
                "redis_primary_found",
                [("primary", .string(primary.description)), ("master", .string(master))])
        } catch  where error.code == .sentinelUnreachable {
            EventLog.event(
                "redis_primary_unknown", level: "warning",
                [("error", .string(error.code.rawValue)), ("message", .string(error.message))])
        } catch {
            let setting = String(error.message.prefix(while: { $0 != ":" }))
            EventLog.event(
                "configuration_invalid", level: "error",
                [("setting", .string(setting)), ("message", .string(error.message))])
            Output.error("siwa-endpoint serve: \(error.message)")
            return .failure(StartRefused(exitStatus: 2))
        }
        return .success(locator)
    }
}
