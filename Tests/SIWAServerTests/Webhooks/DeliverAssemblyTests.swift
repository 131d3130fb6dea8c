import Foundation
import Glibc
import SIWASettings
import SIWASupport
import SIWATestSupport
import SIWAWebhooks
import Synchronization
import Testing

@testable import siwa_endpoint

/// `deliver`'s composition root built in process, as `DeliverCommand.serve` builds it: a real
/// redis-server, a real HTTPS receiver on loopback, the services in a `ServiceGroup` of the
/// test's own (no signals taken, no process started).
@Suite("Deliver assembly", .serialized)
struct DeliverAssemblyTests {
    @Test("built and started in process: an event reaches the receiver, /metrics counts it, a stop returns all")
    func deliversInProcess() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let billing = try stack.receiver("billing")
        let configuration = try WebhookConfiguration(
            environment: try stack.environment([stack.destination("billing", billing)]))
        let parts = DeliverAssembly.build(configuration)
        #expect(parts.workers.map(\.name) == ["deliver-billing"])
        let services = ServiceGroup()
        try parts.start(in: services)
        // The worker's group starts at the stream's end: an event added before it exists is not its.
        #expect(waitUntil(timeout: 10) { (try? stack.pending("deliver:billing")) == 0 })
        try stack.add("consent-revoked", jti: "jti-in-process")
        #expect(waitUntil(timeout: 10) { billing.ids() == ["jti-in-process"] })
        let delivered = #"siwa_webhook_delivered_total{destination="billing"} 1"#
        #expect(waitUntil(timeout: 5) { parts.metrics.render().contains(delivered) })
        let scrape = try WebhookMetricsListenerTests.scrape(port: configuration.metricsListen.port)
        #expect(scrape.answer.contains(delivered))
        services.requestStop()
        let stopped = services.run(shutdownTimeout: .seconds(5))
        #expect(stopped == ServiceGroup.Stopped(cause: .requested, allReturned: true))
        #expect(try stack.pending("deliver:billing") == 0)
    }

    @Test("a metrics address already taken: the start throws before any worker reads the stream")
    func listenRefusalStartsNoWorker() throws {
        let stack = try WebhookStack()
        defer { stack.shutdown() }
        let billing = try stack.receiver("billing")
        var environment = try stack.environment([stack.destination("billing", billing)])
        let taken = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(taken) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(taken, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        try #require(bound == 0 && listen(taken, 1) == 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(taken, $0, &length) }
        }
        environment["SIWA_WEBHOOK_METRICS_LISTEN"] = "127.0.0.1:\(UInt16(bigEndian: address.sin_port))"
        let configuration = try WebhookConfiguration(environment: environment)
        // A worker's `run()` opens its connection first: counted, it says whether one ran.
        let connectionsMade = Mutex(0)
        let parts = DeliverAssembly.build(configuration) {
            connectionsMade.withLock { $0 += 1 }
            return DeliverCommand.connection(configuration)
        }
        let services = ServiceGroup()
        #expect(throws: WebhookMetricsListener.ListenError.self) { try parts.start(in: services) }
        // Every service started has returned once this does: a worker that ran has counted.
        #expect(services.stop(until: .now + .seconds(5)))
        #expect(connectionsMade.withLock { $0 } == 0)
        // The command around it: exit 2, the setting named, nothing delivered.
        let command = try CommandRun.endpoint(["deliver"], environment: environment, timeout: .seconds(20))
        #expect(command.status == 2)
        #expect(command.errors.contains("SIWA_WEBHOOK_METRICS_LISTEN"))
        #expect(billing.ids().isEmpty)
    }
}
