import SIWATelemetry

extension ServerMetrics {
    /// The per-client-ID lines (see `ClientTraffic`): every configured client ID and every
    /// reason has a line from the start (a counter that appears at 1 hides its first
    /// increase from `increase()`); an `aud` we do not list is one label, `unlisted`.
    public static func renderClients(_ traffic: ClientTraffic, now: Int64) -> String {
        let (clients, unlisted, none) = traffic.figures()
        var lines: [String] = []
        lines.append(
            "# HELP siwa_client_notifications_total Genuine notifications (verified, answered 200) per configured client ID, since this process started."
        )
        lines.append("# TYPE siwa_client_notifications_total counter")
        for client in clients {
            lines.append(
                "siwa_client_notifications_total{client_id=\"\(labelValue(client.clientID))\"} \(client.genuine)")
        }
        lines.append(
            "# HELP siwa_client_last_notification_timestamp_seconds Unix time of the last genuine notification for the client ID (this process's, or the last any node recorded in Redis); no line before the first."
        )
        lines.append("# TYPE siwa_client_last_notification_timestamp_seconds gauge")
        for client in clients {
            guard let last = client.lastGenuineAt else { continue }
            lines.append(
                "siwa_client_last_notification_timestamp_seconds{client_id=\"\(labelValue(client.clientID))\"} \(Double(last) / 1000)"
            )
        }
        lines.append(
            "# HELP siwa_client_silence_seconds Seconds since the last genuine notification for the client ID, or since the endpoint first served it when none has come."
        )
        lines.append("# TYPE siwa_client_silence_seconds gauge")
        for client in clients {
            lines.append(
                "siwa_client_silence_seconds{client_id=\"\(labelValue(client.clientID))\"} \(client.silenceSeconds(now: now))"
            )
        }
        lines.append(
            "# HELP siwa_client_silence_alert_seconds The silence after which SIWANotificationsSilent fires for the client ID (SIWA_SILENCE_ALERT_HOURS, SIWA_SILENCE_ALERT_HOURS_BY_CLIENT); 0: never."
        )
        lines.append("# TYPE siwa_client_silence_alert_seconds gauge")
        for client in clients {
            lines.append(
                "siwa_client_silence_alert_seconds{client_id=\"\(labelValue(client.clientID))\"} \(client.silenceAlertSeconds)"
            )
        }
        lines.append(
            "# HELP siwa_client_refusals_total Notifications refused, by the client ID their aud names (configured; \"unlisted\": any other; \"none\": unreadable) and reason (aud, iss, expired, time, signature, key, malformed)."
        )
        lines.append("# TYPE siwa_client_refusals_total counter")
        let rows =
            clients.map { ($0.clientID, $0.refusals) } + [
                (ClientTraffic.unlistedLabel, unlisted), (ClientTraffic.noneLabel, none),
            ]
        for (label, counts) in rows {
            for reason in ClientTraffic.RefusalReason.allCases {
                lines.append(
                    "siwa_client_refusals_total{client_id=\"\(labelValue(label))\",reason=\"\(reason.rawValue)\"} \(counts[reason] ?? 0)"
                )
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
