import SIWARedis
import SIWASettings
import SIWASupport
import SIWAWebhooks

/// The composition root of `deliver`, the sibling of `ServeAssembly`: every part is built
/// here, once, from the checked settings, and handed what it needs; nothing here starts a
/// thread or touches the network. `start(in:)` starts the services in the order below;
/// `DeliverCommand.serve` adds the signals, the lines and the exit status around it.
///
/// What starts before what, and why:
/// 1. the `/metrics` listener (its start binds: a setting that cannot be served refuses the
///    start before any event is read),
/// 2. one worker per destination, in the order of the destinations file (each reads the
///    events stream through its own consumer group, on its own connection).
/// A stop stops them last started first (`ServiceGroup`): a POST in flight finishes or is
/// abandoned unacknowledged, then the listener closes.
struct DeliverAssembly {
    let metrics: WebhookMetrics
    let listener: WebhookMetricsListener
    let workers: [WebhookDestinationWorker]

    /// `makeConnection`: each worker's Redis connection (by default the settings' Redis).
    static func build(
        _ configuration: WebhookConfiguration,
        makeConnection: (@Sendable () -> RedisConnection)? = nil
    ) -> DeliverAssembly {
        let metrics = WebhookMetrics(destinations: configuration.destinations.map(\.name))
        let makeConnection = makeConnection ?? { DeliverCommand.connection(configuration) }
        let listener = WebhookMetricsListener(
            host: configuration.metricsListen.host, port: configuration.metricsListen.port, metrics: metrics)
        let workers = configuration.destinations.map { destination in
            WebhookDestinationWorker(
                destination: destination, poster: DeliverCommand.poster(destination, configuration),
                keyPrefix: configuration.keyPrefix, consumer: configuration.consumer,
                claimIdle: configuration.claimIdle, retryScale: configuration.retryScale, metrics: metrics,
                makeConnection: makeConnection)
        }
        return DeliverAssembly(metrics: metrics, listener: listener, workers: workers)
    }

    /// Starts the listener, then the workers. A listener that cannot bind throws before any
    /// worker starts (the caller stops the group and refuses the setting).
    func start(in services: ServiceGroup) throws(WebhookMetricsListener.ListenError) {
        try services.start(listener)
        for worker in workers { services.start(worker) }
    }
}
