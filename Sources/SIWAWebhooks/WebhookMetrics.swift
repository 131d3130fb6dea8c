import Synchronization

/// The deliverer's figures, per destination, as `GET /metrics` shows them (Prometheus text).
public final class WebhookMetrics: Sendable {
    /// Why an attempt failed: the `cause` label.
    public static let causes = [
        "timeout", "connect", "tls", "refused_address", "redirect", "client_error", "server_error", "slow_down", "gone",
        "response_too_large",
    ]
    static let bucketBounds: [Double] = [
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 86_400,
    ]

    struct Figures {
        var delivered = 0
        var attempts = 0
        var exhausted = 0
        var failed: [String: Int] = [:]
        var buckets = [Int](repeating: 0, count: WebhookMetrics.bucketBounds.count)
        var latencyCount = 0
        var latencySum = 0.0
        var pending = 0
        var oldestPendingAge = 0.0
        var disabled = false
    }

    private let figures: Mutex<[String: Figures]>
    private let names: [String]

    public init(destinations: [String]) {
        names = destinations
        figures = Mutex(Dictionary(uniqueKeysWithValues: destinations.map { ($0, Figures()) }))
    }

    func update(_ destination: String, _ change: (inout Figures) -> Void) {
        figures.withLock { all in
            var entry = all[destination] ?? Figures()
            change(&entry)
            all[destination] = entry
        }
    }

    public func attempted(_ destination: String) { update(destination) { $0.attempts += 1 } }

    public func delivered(_ destination: String, latencySeconds: Double) {
        update(destination) { figures in
            figures.delivered += 1
            figures.latencyCount += 1
            figures.latencySum += latencySeconds
            for (index, bound) in Self.bucketBounds.enumerated() where latencySeconds <= bound {
                figures.buckets[index] += 1
            }
        }
    }

    public func failed(_ destination: String, cause: String) {
        update(destination) { $0.failed[cause, default: 0] += 1 }
    }
    public func exhausted(_ destination: String) { update(destination) { $0.exhausted += 1 } }
    public func setDisabled(_ destination: String, _ disabled: Bool) { update(destination) { $0.disabled = disabled } }

    public func setBacklog(_ destination: String, pending: Int, oldestAgeSeconds: Double) {
        update(destination) {
            $0.pending = pending
            $0.oldestPendingAge = oldestAgeSeconds
        }
    }

    /// The Prometheus text exposition (version 0.0.4).
    public func render() -> String {
        let snapshot = figures.withLock { $0 }
        var out = ""
        func family(_ name: String, _ type: String, _ help: String, _ lines: (String, Figures) -> String) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            for destination in names { out += lines(destination, snapshot[destination] ?? Figures()) }
        }
        func label(_ destination: String) -> String { "destination=\"\(destination)\"" }
        out += "# HELP siwa_webhook_deliverer_up 1 while the deliverer runs.\n# TYPE siwa_webhook_deliverer_up gauge\n"
        out += "siwa_webhook_deliverer_up 1\n"
        family("siwa_webhook_delivered_total", "counter", "Events delivered with a 2xx.") {
            "siwa_webhook_delivered_total{\(label($0))} \($1.delivered)\n"
        }
        family("siwa_webhook_attempts_total", "counter", "Delivery attempts (POSTs started).") {
            "siwa_webhook_attempts_total{\(label($0))} \($1.attempts)\n"
        }
        family("siwa_webhook_failed_attempts_total", "counter", "Failed attempts, by cause.") { destination, figures in
            Self.causes.map {
                "siwa_webhook_failed_attempts_total{\(label(destination)),cause=\"\($0)\"} \(figures.failed[$0] ?? 0)\n"
            }.joined()
        }
        family(
            "siwa_webhook_exhausted_total", "counter", "Events kept as failed after the last retry of the schedule."
        ) { "siwa_webhook_exhausted_total{\(label($0))} \($1.exhausted)\n" }
        family("siwa_webhook_pending", "gauge", "Events not yet delivered (pending and not yet read).") {
            "siwa_webhook_pending{\(label($0))} \($1.pending)\n"
        }
        family("siwa_webhook_oldest_pending_age_seconds", "gauge", "Age of the oldest event not yet delivered.") {
            "siwa_webhook_oldest_pending_age_seconds{\(label($0))} \($1.oldestPendingAge)\n"
        }
        family("siwa_webhook_destination_disabled", "gauge", "1 when the destination is disabled (410 Gone).") {
            "siwa_webhook_destination_disabled{\(label($0))} \($1.disabled ? 1 : 0)\n"
        }
        family(
            "siwa_webhook_delivery_seconds", "histogram", "From the event's stream entry to the destination's 2xx."
        ) { destination, figures in
            var lines = ""
            for (index, bound) in Self.bucketBounds.enumerated() {
                lines +=
                    "siwa_webhook_delivery_seconds_bucket{\(label(destination)),le=\"\(bound)\"} \(figures.buckets[index])\n"
            }
            lines += "siwa_webhook_delivery_seconds_bucket{\(label(destination)),le=\"+Inf\"} \(figures.latencyCount)\n"
            lines += "siwa_webhook_delivery_seconds_sum{\(label(destination))} \(figures.latencySum)\n"
            lines += "siwa_webhook_delivery_seconds_count{\(label(destination))} \(figures.latencyCount)\n"
            return lines
        }
        return out
    }
}
