import SIWARedis

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

    /// The transfer gauges, one series per client ID (and direction) with a recorded window;
    /// nothing when there is none.
    public func metricsText(now: Int64) -> String {
        guard !windows.isEmpty else { return "" }
        var lines = [
            "# HELP siwa_transfer_window_seconds_left Seconds until Apple's 60-day app transfer window closes (0 once closed).",
            "# TYPE siwa_transfer_window_seconds_left gauge",
        ]
        for window in windows {
            let left = Double(max(0, window.closesAt - now)) / 1000
            lines.append(
                "siwa_transfer_window_seconds_left{client_id=\"\(ServerMetrics.labelValue(window.clientID))\"} \(left)")
        }
        lines += [
            "# HELP siwa_transfer_users_pending Identifiers given to transfer export or import and not exchanged yet.",
            "# TYPE siwa_transfer_users_pending gauge",
        ]
        for window in windows {
            let client = ServerMetrics.labelValue(window.clientID)
            lines.append(
                "siwa_transfer_users_pending{client_id=\"\(client)\",direction=\"export\"} \(window.pendingExport)")
            lines.append(
                "siwa_transfer_users_pending{client_id=\"\(client)\",direction=\"import\"} \(window.pendingImport)")
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
