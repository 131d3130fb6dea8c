import Foundation
import SIWAFastCGI
import SIWASettings
import SIWASupport

@testable import siwa_endpoint

/// `serve` built in process: the assembly serve builds (`ServeAssembly`), from the same
/// settings and the same start-up checks, its services started in serve's order
/// (`ServeAssembly.start(in:)`), serving the same unix socket. No signal is handled (the test
/// process's are its own) and its log goes to the test's standard error. For the tests of
/// what runs the same in a process and in process (requests, Redis, the spool); signals,
/// exit statuses, descriptors and log lines stay with `ServeProcess`.
final class InProcessServe {
    struct StartFailure: Error, CustomStringConvertible { let description: String }

    let assembly: ServeAssembly
    private let services = ServiceGroup()
    private let shutdownTimeout: Duration

    init(environment: [String: String]) throws {
        let configuration = try ServerConfiguration(environment: environment)
        try configuration.checkHost()
        guard case .success(let redisAtStart) = ServeCommand.startChecks(configuration, readingSpool: false) else {
            throw StartFailure(description: "serve's start-up checks refused the settings (see the log above)")
        }
        assembly = try ServeAssembly.build(configuration, redisAtStart: redisAtStart)
        shutdownTimeout = configuration.fastCGI.server.shutdownTimeout
        do throws(FastCGIError) {
            try assembly.start(in: services)
        } catch {
            _ = services.stop(until: .now + shutdownTimeout)
            throw error
        }
    }

    /// Stops the services as serve's SIGTERM does, last started first, within serve's deadline.
    func stop() {
        _ = services.stop(until: .now + shutdownTimeout)
    }
}
