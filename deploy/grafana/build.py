#!/usr/bin/env python3
"""Writes deploy/grafana/siwa-endpoint.json, the Grafana dashboard, from the panel list
below (its one source). Run it after changing the list; `--check` exits 1 when the file
differs from what the list makes (the test suite checks the same, and that every query
parses and names only metrics /metrics serves: deploy-tests/test_grafana_dashboard.py).

Each query may use $job, $instance and $__rate_interval (Grafana fills them in)."""

import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
OUTPUT = HERE / "siwa-endpoint.json"

# Every series of the responder, selected by the dashboard's variables.
S = 'job="$job", instance=~"$instance"'
RATE = "$__rate_interval"

# Metrics of the webhook deliverer (a separate process with its own /metrics), not of
# serve: their panels are marked so, and the test checks them against its list.
DELIVERER = "the webhook deliverer's /metrics"

# (row title, [panel, ...]); a panel: (title, unit, [(query, legend), ...], description).
ROWS = [
    ("Notifications", [
        ("Answers by outcome", "reqps",
         [(f"sum by (outcome) (rate(siwa_requests_total{{{S}}}[{RATE}]))", "{{outcome}}")],
         "Every request the responder answered, by outcome (applied, duplicate, stale, spooled, refused, ...)."),
        ("Genuine notifications by client ID", "reqps",
         [(f"sum by (client_id) (rate(siwa_client_notifications_total{{{S}}}[{RATE}]))", "{{client_id}}")],
         "Verified notifications answered 200, per client ID of SIWA_CLIENT_IDS."),
        ("Refusals by client ID and reason", "reqps",
         [(f"sum by (client_id, reason) (rate(siwa_client_refusals_total{{{S}}}[{RATE}]))",
           "{{client_id}} {{reason}}")],
         "Refused notifications; client_id 'unlisted' is an Apple-signed token for a client ID not served."),
        ("Silence by client ID", "s",
         [(f"max by (client_id) (siwa_client_silence_seconds{{{S}}})", "{{client_id}}"),
          (f"max by (client_id) (siwa_client_silence_alert_seconds{{{S}}})", "{{client_id}} alert after")],
         "Time since the last genuine notification, beside the threshold of SIWANotificationsSilent."),
        ("5xx answers by code", "reqps",
         [(f'sum by (code) (rate(siwa_requests_total{{{S}, status=~"5..", outcome!="unhealthy"}}[{RATE}]))',
           "{{code}}")],
         "Answers Apple retries (probes' own 503 left out)."),
        ("Latency", "s",
         [(f"histogram_quantile(0.5, sum by (le) (rate(siwa_request_duration_seconds_bucket{{{S}}}[{RATE}])))",
           "p50"),
          (f"histogram_quantile(0.99, sum by (le) (rate(siwa_request_duration_seconds_bucket{{{S}}}[{RATE}])))",
           "p99")],
         "Time from request to response inside the responder."),
    ]),
    ("Spool", [
        ("Spool depth", "short",
         [(f"siwa_spool_depth{{{S}}}", "{{instance}}")],
         "Verified notifications waiting in the spool for Redis, per instance."),
        ("Oldest spooled record", "s",
         [(f"siwa_spool_oldest_age_seconds{{{S}}}", "{{instance}}")],
         "How long the first waiting record has waited (0: none waits)."),
        ("Replayed, rejected, torn", "ops",
         [(f"sum(rate(siwa_spool_replayed_total{{{S}}}[{RATE}]))", "replayed"),
          (f"sum(rate(siwa_spool_rejected_total{{{S}}}[{RATE}]))", "rejected"),
          (f"sum(rate(siwa_spool_torn_records_total{{{S}}}[{RATE}]))", "torn")],
         "Records the replay applied, set aside as rejected by Redis, or found torn."),
    ]),
    ("Apple's keys", [
        ("JWKS age", "s",
         [(f"siwa_jwks_age_seconds{{{S}}}", "{{instance}}")],
         "Time since the last good JWKS (SIWAAppleKeysStale above 2 h)."),
        ("Keys and refresh failures", "short",
         [(f"siwa_jwks_keys{{{S}}}", "usable {{instance}}"),
          (f"siwa_jwks_unusable_keys{{{S}}}", "unusable {{instance}}"),
          (f"increase(siwa_jwks_refresh_failures_total{{{S}}}[{RATE}])", "refresh failures {{instance}}")],
         "Signing keys loaded, entries that cannot verify, failed refreshes."),
    ]),
    ("Redis", [
        ("Redis errors and replica shortfalls", "ops",
         [(f"sum(rate(siwa_redis_errors_total{{{S}}}[{RATE}]))", "errors"),
          (f"sum(rate(siwa_redis_replica_shortfalls_total{{{S}}}[{RATE}]))", "replica shortfalls")],
         "Calls Redis did not answer or refused; writes fewer replicas acknowledged than asked."),
        ("Failovers (Sentinel)", "short",
         [(f"sum by (instance) (increase(siwa_redis_failovers_total{{{S}}}[{RATE}]))", "failovers {{instance}}"),
          (f"sum by (instance) (increase(siwa_redis_sentinel_discoveries_total{{{S}}}[{RATE}]))",
           "discoveries {{instance}}"),
          (f"sum by (instance) (increase(siwa_redis_sentinel_stale_answers_total{{{S}}}[{RATE}]))",
           "stale answers {{instance}}")],
         "With SIWA_REDIS_SENTINELS: the primary in use moved, the sentinels asked, answers naming a non-primary."),
        ("Primary changes (Cluster)", "short",
         [(f"sum by (instance) (increase(siwa_redis_cluster_primary_changes_total{{{S}}}[{RATE}]))",
           "primary changes {{instance}}"),
          (f"sum by (instance) (increase(siwa_redis_cluster_discoveries_total{{{S}}}[{RATE}]))",
           "discoveries {{instance}}"),
          (f"sum by (instance) (increase(siwa_redis_cluster_moved_total{{{S}}}[{RATE}]))", "MOVED {{instance}}"),
          (f"sum by (instance) (increase(siwa_redis_cluster_ask_total{{{S}}}[{RATE}]))", "ASK {{instance}}")],
         "With SIWA_REDIS_CLUSTER_NODES: the slot's primary changed, slots asked, redirections followed."),
    ]),
    ("Deletion duty", [
        ("Deletions waiting", "short",
         [(f"max(siwa_deletions_stream_entries{{{S}}})", "stream entries"),
          (f"max by (group) (siwa_deletions_pending{{{S}}})", "pending {{group}}"),
          (f"max(siwa_deletions_consumer_groups{{{S}}})", "consumer groups")],
         "account-deleted events in the deletions stream and what each consumer group has not acknowledged."),
        ("Oldest unacknowledged deletion", "s",
         [(f"max by (group) (siwa_deletions_oldest_pending_age_seconds{{{S}}})", "{{group}}"),
          (f"max(siwa_deletions_oldest_entry_age_seconds{{{S}}})", "oldest entry")],
         "SIWADeletionLate and SIWADeletionOverdue fire on the first line (7 and 25 days by default)."),
    ]),
    # Only a deployment that serves Google (SIWA_GOOGLE_CLIENT_IDS) has these series.
    ("Google's Cross-Account Protection", [
        ("Google: genuine tokens by client ID", "reqps",
         [(f"sum by (client_id) (rate(siwa_google_client_events_total{{{S}}}[{RATE}]))", "{{client_id}}")],
         "Security Event Tokens answered 202, per client ID of SIWA_GOOGLE_CLIENT_IDS."),
        ("Google: refusals by client ID and reason", "reqps",
         [(f"sum by (client_id, reason) (rate(siwa_google_client_refusals_total{{{S}}}[{RATE}]))",
           "{{client_id}} {{reason}}")],
         "Refused tokens (400); client_id 'unlisted' with reason 'aud' is a Google-signed token for a client ID "
         "not served (SIWAGoogleTokensForUnlistedClientID)."),
        ("Google: silence by client ID", "s",
         [(f"min by (client_id) (siwa_google_client_silence_seconds{{{S}}})", "{{client_id}}")],
         "Time since the last genuine token; SIWAGoogleEventsSilent fires past 7 days."),
        ("Google's keys", "short",
         [(f"min(siwa_google_keys{{{S}}})", "usable keys (fewest on a node)"),
          (f"sum(increase(siwa_google_keys_refresh_failures_total{{{S}}}[{RATE}]))", "refresh failures")],
         "Google's signing keys (from its risc-configuration document) and failed fetches; /healthz does not "
         "depend on them."),
    ]),
    ("Webhook delivery (" + DELIVERER + ")", [
        ("Deliveries", "ops",
         [('sum(rate(siwa_webhook_delivered_total{job=~"$job.*"}[' + RATE + ']))', "delivered"),
          ('sum(rate(siwa_webhook_failed_attempts_total{job=~"$job.*"}[' + RATE + ']))', "failed attempts"),
          ('sum(increase(siwa_webhook_exhausted_total{job=~"$job.*"}[' + RATE + ']))', "exhausted")],
         "From " + DELIVERER + " (where configured): deliveries, failed attempts, deliveries given up."),
        ("Pending deliveries", "short",
         [('sum(siwa_webhook_pending{job=~"$job.*"})', "pending"),
          ('max(siwa_webhook_oldest_pending_age_seconds{job=~"$job.*"})', "oldest pending (s)"),
          ('sum(siwa_webhook_destination_disabled{job=~"$job.*"})', "destinations disabled")],
         "From " + DELIVERER + " (where configured): the queue, its oldest entry, destinations switched off."),
    ]),
]


def panel(identifier, title, unit, queries, description, x, y):
    return {
        "id": identifier,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {"refId": chr(ord("A") + index), "expr": expr, "legendFormat": legend,
             "datasource": {"type": "prometheus", "uid": "${datasource}"}}
            for index, (expr, legend) in enumerate(queries)
        ],
    }


def dashboard():
    panels, identifier, y = [], 1, 0
    for title, row in ROWS:
        panels.append({"id": identifier, "type": "row", "title": title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        identifier, y = identifier + 1, y + 1
        for index, (panel_title, unit, queries, description) in enumerate(row):
            if index and index % 3 == 0:
                y += 8
            panels.append(panel(identifier, panel_title, unit, queries, description, (index % 3) * 8, y))
            identifier += 1
        y += 8
    variable = {"type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"}, "refresh": 2}
    return {
        "title": "siwa-endpoint",
        "uid": "siwa-endpoint",
        "description": "Sign in with Apple notifications: answers, spool, keys, Redis, deletion duty, webhooks. "
                       "Generated by deploy/grafana/build.py.",
        "tags": ["siwa-endpoint"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
            dict(variable, name="job", label="Job", query="label_values(siwa_spool_depth, job)",
                 current={"text": "siwa-endpoint", "value": "siwa-endpoint"}),
            dict(variable, name="instance", label="Instance", multi=True, includeAll=True, allValue=".*",
                 query='label_values(siwa_spool_depth{job="$job"}, instance)'),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render():
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def main(arguments):
    text = render()
    if "--check" in arguments:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.name} differs from its panel list: run deploy/grafana/build.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
