"""The shipped Prometheus alert rules (deploy/prometheus): promtool checks them and runs
their unit tests; every alert has a case that fires and one that does not, uses only
metrics the responder (or the webhook deliverer) exports, and is explained in the Operations section of docs/operations.md."""

import re
import shutil
import subprocess

from deploy_harness import REPO

RULES_DIR = REPO / "deploy" / "prometheus"
RULES = RULES_DIR / "siwa-endpoint-rules.yml"
RULE_TESTS = RULES_DIR / "siwa-endpoint-rules.test.yml"


def promtool(*args):
    tool = shutil.which("promtool")
    assert tool is not None, "promtool is missing (scripts/install-deps installs the prometheus package)"
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120, cwd=RULES_DIR)


def alert_names():
    return re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), flags=re.M)


def recorded_settings():
    """The rules file's own settings: recording rules holding a threshold."""
    return re.findall(r"^\s+- record: (siwa:[a-z_]+)$", RULES.read_text(), flags=re.M)


def test_promtool_checks_the_rules_and_their_tests_pass():
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_names()) + len(recorded_settings())} rules found" in checked.stdout
    tested = promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_has_a_firing_case_and_a_quiet_one():
    names = alert_names()
    assert len(names) == len(set(names)) == 28
    text = RULE_TESTS.read_text()
    for name in names:
        evaluations = re.findall(rf"alertname: {name}\n        exp_alerts:( \[\])?", text)
        assert len(evaluations) == 2, name
        assert sorted(evaluations) == ["", " []"], f"{name}: one evaluation that fires, one that does not"
        # The firing case names the instance that fires; its other instance must stay quiet.
        case = text.split(f"  # {name}:")[1].split("\n  # ")[0]
        assert 'instance="fires:9102"' in case and 'instance="quiet:9102"' in case, name


# The webhook deliverer's metrics (siwa-endpoint deliver, its own /metrics), as its interface
# fixes them. Once the deliverer's source writes them, the scan below must find every one.
DELIVERER_METRICS = {
    "siwa_webhook_delivered_total", "siwa_webhook_failed_attempts_total", "siwa_webhook_attempts_total",
    "siwa_webhook_delivery_seconds", "siwa_webhook_pending", "siwa_webhook_oldest_pending_age_seconds",
    "siwa_webhook_destination_disabled", "siwa_webhook_exhausted_total", "siwa_webhook_deliverer_up",
}


def test_rules_use_only_metrics_the_responder_exports():
    # serve's metrics text: ServerMetrics and its extensions (telemetry, the store, the responder), the
    # Redis locators' lines, the keys' lines.
    source = "".join(path.read_text() for path in sorted((REPO / "Sources").glob("SIWA*/ServerMetrics*.swift")))
    source += (REPO / "Sources/SIWATelemetry/RedisLocator+Metrics.swift").read_text()
    source += (REPO / "Sources/SIWAKeys/JWKSProvider+Metrics.swift").read_text()
    exported = set(re.findall(r"# TYPE (siwa_[a-z_]+) ", source))
    assert "siwa_spool_depth" in exported
    written = set(re.findall(r"\b(siwa_webhook_[a-z_]+)\b", "".join(p.read_text() for p in (REPO / "Sources").rglob("*.swift"))))
    if written:
        assert DELIVERER_METRICS <= written, DELIVERER_METRICS - written
    used = set(re.findall(r"\b(siwa_[a-z_]+)\b", RULES.read_text())) - {"siwa_endpoint"}
    assert used and used <= exported | DELIVERER_METRICS, used - exported - DELIVERER_METRICS


def test_each_summary_says_what_to_do_and_points_at_the_operations_page():
    page = (REPO / "docs/operations.md").read_text()
    operations = page.split("\n## Operations\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.split(r"\n      - alert: ", RULES.read_text())[1:]
    assert len(blocks) == len(alert_names())
    for block in blocks:
        name = block.split("\n", 1)[0]
        assert f"(docs/operations.md: Operations, {name})." in " ".join(block.split()), name  # YAML folds lines
        assert f"`{name}`" in operations, f"the Operations section of docs/operations.md does not explain {name}"


def test_deletion_thresholds_are_settings_of_the_file():
    assert recorded_settings() == ["siwa:deletion_late_after_seconds", "siwa:deletion_overdue_after_seconds"]
    text = RULES.read_text()
    assert "expr: vector(604800)" in text and "expr: vector(2160000)" in text  # 7 and 25 days
    for name in recorded_settings():
        assert text.count(name) == 2, f"{name}: defined once and used by one alert"
