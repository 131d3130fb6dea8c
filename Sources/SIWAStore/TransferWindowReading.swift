import SIWARedis
import SIWATelemetry

/// The app transfer windows the deletion-duty monitor reads for `/metrics`: per client ID with
/// a recorded transfer (`P:transfer:{<client_id>}`), when its 60-day window closes and how
/// many identifiers each direction was given and has not exchanged yet
/// (`P:transfer-pending:{<client_id>}:export|import`). Three commands per client ID.
public struct TransferWindowReading: Sendable, Equatable {
    public struct Window: Sendable, Equatable {
        public let clientID: String
        public let closesAt: Int64
        public let pendingExport: Int
        public let pendingImport: Int
    }

    public let windows: [Window]

    public static func read(
        _ connection: RedisConnection, keys: RedisKeyLayout, clientIDs: [String]
    ) throws(RedisError) -> TransferWindowReading {
        var windows: [Window] = []
        for clientID in clientIDs.sorted() {
            guard
                let closes = try connection.command("HGET", keys.transferWindow(clientID: clientID), "closes_at")
                    .string,
                let closesAt = Int64(closes)
            else { continue }
            let export = try connection.command(
                "SCARD", keys.transferPending(clientID: clientID, direction: "export")
            ).integer
            let imported = try connection.command(
                "SCARD", keys.transferPending(clientID: clientID, direction: "import")
            ).integer
            windows.append(
                Window(
                    clientID: clientID, closesAt: closesAt, pendingExport: Int(export ?? 0),
                    pendingImport: Int(imported ?? 0)))
        }
        return TransferWindowReading(windows: windows)
    }

    /// The transfer gauges of `/metrics` (`ServerMetrics.renderTransferWindows`).
    public func metricsText(now: Int64) -> String {
        ServerMetrics.renderTransferWindows(self, now: now)
    }
}
