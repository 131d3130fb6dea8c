import SIWATelemetry

extension ServerMetrics {
    /// The app transfer gauges (see `TransferWindowReading`), one series per client ID (and
    /// direction) with a recorded transfer; nothing when there is none. Time left is counted
    /// against `now` (ms), so it keeps falling while Redis cannot be read.
    public static func renderTransferWindows(_ reading: TransferWindowReading, now: Int64) -> String {
        guard !reading.windows.isEmpty else { return "" }
        var lines = [
            "# HELP siwa_transfer_window_seconds_left Seconds until Apple's 60-day app transfer window closes (0 once closed).",
            "# TYPE siwa_transfer_window_seconds_left gauge",
        ]
        for window in reading.windows {
            let left = Double(max(0, window.closesAt - now)) / 1000
            lines.append("siwa_transfer_window_seconds_left{client_id=\"\(labelValue(window.clientID))\"} \(left)")
        }
        lines += [
            "# HELP siwa_transfer_users_pending Identifiers given to transfer export or import and not exchanged yet.",
            "# TYPE siwa_transfer_users_pending gauge",
        ]
        for window in reading.windows {
            let client = labelValue(window.clientID)
            for (direction, pending) in [("export", window.pendingExport), ("import", window.pendingImport)] {
                let labels = "client_id=\"\(client)\",direction=\"\(direction)\""
                lines.append("siwa_transfer_users_pending{\(labels)} \(pending)")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
