import SIWATelemetry

extension ServerMetrics {
    /// Google's lines of the metrics text: per Google client ID, the tokens accepted (202)
    /// and the refusals by reason (the same reasons as Apple's, with `unlisted` and `none`
    /// labels for other and unreadable `aud`s), and the age and size of Google's key set.
    /// Families of their own, so Apple's (and its silence alert) are unchanged.
    /// `now` is Unix milliseconds.
    public static func renderGoogleClients(_ google: SecurityEventReceiver, now: Int64) -> String {
        let (clients, unlisted, none) = google.traffic.figures()
        var lines: [String] = [
            "# HELP siwa_google_client_events_total Genuine Security Event Tokens (verified, answered 202) per configured Google client ID, since this process started.",
            "# TYPE siwa_google_client_events_total counter",
        ]
        for client in clients {
            lines.append(
                "siwa_google_client_events_total{client_id=\"\(labelValue(client.clientID))\"} \(client.genuine)")
        }
        // SIWAGoogleEventsSilent reads this (over 7 days): Google pushes only when something
        // happens to a user, so the threshold is the rules file's, not Apple's setting.
        lines += [
            "# HELP siwa_google_client_silence_seconds Seconds since the last genuine Security Event Token for the Google client ID this process took, or since it started serving it when none has come.",
            "# TYPE siwa_google_client_silence_seconds gauge",
        ]
        for client in clients {
            lines.append(
                "siwa_google_client_silence_seconds{client_id=\"\(labelValue(client.clientID))\"} \(client.silenceSeconds(now: now))"
            )
        }
        lines += [
            "# HELP siwa_google_client_refusals_total Security Event Tokens refused, by the Google client ID their aud names (configured; \"unlisted\": any other; \"none\": unreadable) and reason (aud, iss, time, signature, key, malformed).",
            "# TYPE siwa_google_client_refusals_total counter",
        ]
        let labelled =
            clients.map { ($0.clientID, $0.refusals) } + [
                (ClientTraffic.unlistedLabel, unlisted), (ClientTraffic.noneLabel, none),
            ]
        for (label, refusals) in labelled {
            for reason in ClientTraffic.RefusalReason.allCases where reason != .expired {
                lines.append(
                    "siwa_google_client_refusals_total{client_id=\"\(labelValue(label))\",reason=\"\(reason.rawValue)\"} \(refusals[reason] ?? 0)"
                )
            }
        }
        let keys = google.keys.metrics(now: now / 1000)
        lines += [
            "# HELP siwa_google_keys Usable keys in Google's key set (from its risc-configuration document's jwks_uri).",
            "# TYPE siwa_google_keys gauge",
            "siwa_google_keys \(keys.usableKeyCount)",
            "# HELP siwa_google_keys_refresh_failures_total Fetches of Google's configuration document or keys that failed or brought nothing usable.",
            "# TYPE siwa_google_keys_refresh_failures_total counter",
            "siwa_google_keys_refresh_failures_total \(keys.refreshFailures)",
        ]
        if let age = keys.ageSeconds {
            lines += [
                "# HELP siwa_google_keys_age_seconds Seconds since Google's keys were fetched.",
                "# TYPE siwa_google_keys_age_seconds gauge", "siwa_google_keys_age_seconds \(age)",
            ]
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
