import SIWATelemetry

extension ServerMetrics {
    /// The deletion-duty gauges (see `DeletionDutyMonitor`); only the reading's age before
    /// the first reading. Ages are counted against `now` (ms), so they keep growing while
    /// Redis cannot be read.
    public static func renderDeletionDuty(
        _ last: (reading: DeletionDutyReading, readAt: Int64)?, now: Int64
    ) -> String {
        func seconds(since milliseconds: Int64) -> String { String(Double(max(0, now - milliseconds)) / 1000) }
        var lines: [String] = []
        lines.append(
            "# HELP siwa_deletions_reading_age_seconds Seconds since the deletions stream was last read from Redis (the deletion figures are that reading's)."
        )
        lines.append("# TYPE siwa_deletions_reading_age_seconds gauge")
        lines.append("siwa_deletions_reading_age_seconds \(last.map { seconds(since: $0.readAt) } ?? "NaN")")
        guard let reading = last?.reading else { return lines.joined(separator: "\n") + "\n" }
        lines.append(
            "# HELP siwa_deletions_stream_entries Entries in the deletions stream (one per account-deleted recorded, until trimmed)."
        )
        lines.append("# TYPE siwa_deletions_stream_entries gauge")
        lines.append("siwa_deletions_stream_entries \(reading.entries)")
        lines.append(
            "# HELP siwa_deletions_oldest_entry_age_seconds Age of the deletions stream's oldest entry (0 when empty).")
        lines.append("# TYPE siwa_deletions_oldest_entry_age_seconds gauge")
        lines.append("siwa_deletions_oldest_entry_age_seconds \(reading.oldestEntryAt.map(seconds) ?? "0")")
        lines.append(
            "# HELP siwa_deletions_consumer_groups Consumer groups on the deletions stream (0: nobody acts on account deletions)."
        )
        lines.append("# TYPE siwa_deletions_consumer_groups gauge")
        lines.append("siwa_deletions_consumer_groups \(reading.groups.count)")
        lines.append(
            "# HELP siwa_deletions_pending Deletions the consumer group has not acknowledged (delivered or not).")
        lines.append("# TYPE siwa_deletions_pending gauge")
        for group in reading.groups {
            lines.append("siwa_deletions_pending{group=\"\(labelValue(group.name))\"} \(group.pending)")
        }
        lines.append(
            "# HELP siwa_deletions_oldest_pending_age_seconds Age of the oldest deletion the consumer group has not acknowledged (0 when none)."
        )
        lines.append("# TYPE siwa_deletions_oldest_pending_age_seconds gauge")
        for group in reading.groups {
            lines.append(
                "siwa_deletions_oldest_pending_age_seconds{group=\"\(labelValue(group.name))\"} \(group.oldestPendingAt.map(seconds) ?? "0")"
            )
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
