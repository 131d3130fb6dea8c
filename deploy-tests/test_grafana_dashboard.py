"""The Grafana dashboard (deploy/grafana/siwa-endpoint.json): the file is what its
generator makes from its panel list; every query parses (promtool checks each as a
recording rule); every metric a query names is one the real `siwa-endpoint serve` serves
on /metrics (read from the binary run with Sentinel, and again with Redis Cluster, each
against real redis-servers, Apple's keys served by the test kit under a test CA), except
the webhook deliverer's, checked against the list below until the deliverer's /metrics
can be read here."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from deploy_harness import REPO, RedisServer, free_port, stop_process, wait_until
from soak import CLUSTER_KEY_PREFIX, MASTER, ClusterSet, Sentinel, cli, fastcgi_request, free_port_with_bus_port
from stack import KEY_ID, JWKSNginxStack, ServeProcess, find_binary, build_binary, run, write_endpoint_env

GRAFANA = REPO / "deploy" / "grafana"
DASHBOARD = GRAFANA / "siwa-endpoint.json"
# The webhook deliverer's metric names (a separate process, being built): tie these to its
# /metrics once it lands.
DELIVERER_METRICS = {
    "siwa_webhook_delivered_total", "siwa_webhook_failed_attempts_total", "siwa_webhook_pending",
    "siwa_webhook_oldest_pending_age_seconds", "siwa_webhook_destination_disabled", "siwa_webhook_exhausted_total",
}
# What Grafana fills in, as promtool must see it.
VARIABLES = {"$__rate_interval": "5m", "$job": "siwa-endpoint", "$instance": ".*"}


def queries():
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] if panel["type"] != "row"
            for target in panel["targets"]]


def concrete(expr):
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def metric_names(expr):
    names = set(re.findall(r"\b(siwa_[a-z_]+)\b", expr))
    return names - {"siwa_endpoint"}


def test_dashboard_is_what_its_generator_writes():
    checked = subprocess.run([sys.executable, str(GRAFANA / "build.py"), "--check"], capture_output=True, text=True,
                             timeout=30)
    assert checked.returncode == 0, checked.stderr


def test_every_query_parses(tmp_path):
    tool = shutil.which("promtool")
    assert tool is not None, "promtool is missing (scripts/install-deps installs the prometheus package)"
    exprs = [concrete(expr) for _, expr in queries()]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{index}", "expr": expr} for index, expr in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    checked = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in checked.stdout


def test_webhook_panels_are_the_deliverers_and_say_so():
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        used = set().union(*(metric_names(target["expr"]) for target in panel["targets"]))
        if used & DELIVERER_METRICS:
            assert used <= DELIVERER_METRICS, panel["title"]
            assert "webhook deliverer's /metrics" in panel["description"], panel["title"]
    all_used = set().union(*(metric_names(expr) for _, expr in queries()))
    assert DELIVERER_METRICS <= all_used


def served_names(text):
    """The metric names of the samples in a /metrics text (histogram series included)."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return names


@pytest.fixture(scope="module")
def served_metrics(workdir, pki, rsa_cert):
    binary = find_binary() or build_binary()
    directory = workdir / "dashboard"
    kit = directory / "kit"
    run([str(binary), "keygen", "--out", str(kit), "--kid", KEY_ID])
    started = []
    try:
        nginx = JWKSNginxStack(directory / "nginx", *rsa_cert, kit / "test-jwks.json").start()
        started.append(nginx)
        primary = RedisServer(directory / "primary", aof=False)
        started.append(primary)
        # A consumer group on the deletions stream, so the per-group deletion figures have
        # a sample from serve's first reading.
        assert primary.cli("XGROUP", "CREATE", "siwa:deletions", "mailer", "$", "MKSTREAM").strip() == "OK"
        sentinel = Sentinel(directory / "sentinel", primary.port)
        started.append(sentinel)
        nodes = [ClusterSet.start_node(directory / f"node-{index}", free_port_with_bus_port()) for index in range(3)]
        started.extend(nodes)
        create = subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{node.port}" for node in nodes],
                                 "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True,
                                timeout=60)
        assert create.returncode == 0, create.stdout + create.stderr
        assert wait_until(lambda: all("cluster_state:ok" in (cli(node.port, "CLUSTER", "INFO") or "")
                                      for node in nodes), timeout=30, interval=0.1)
        texts = []
        for name, topology in (
                ("sentinel", {"SIWA_REDIS_SENTINELS": f"127.0.0.1:{sentinel.port}",
                              "SIWA_REDIS_SENTINEL_MASTER": MASTER}),
                ("cluster", {"SIWA_REDIS_CLUSTER_NODES": ",".join(f"127.0.0.1:{node.port}" for node in nodes),
                             "SIWA_KEY_PREFIX": CLUSTER_KEY_PREFIX})):
            serve_dir = directory / f"serve-{name}"
            serve_dir.mkdir(parents=True)
            socket_path = serve_dir / "fcgi.sock"
            env_file = serve_dir / "endpoint.env"
            write_endpoint_env(env_file, {
                "SIWA_CLIENT_IDS": "com.example.app", "SIWA_JWKS_URL": nginx.jwks_url,
                "SIWA_JWKS_CA_FILE": str(pki.ca_cert), "SIWA_JWKS_CACHE": str(serve_dir / "jwks-cache.json"),
                "SIWA_REDIS_URL": "redis://127.0.0.1:6379/0", "SIWA_FCGI_SOCKET": str(socket_path),
                "SIWA_SPOOL_DIR": str(serve_dir / "spool"), "SIWA_WORKERS": "2",
                # Google served, so that its families are served: its document is not found
                # (a 404 from the keys' nginx), which leaves every family but the keys' age.
                "SIWA_GOOGLE_CLIENT_IDS": "1234567890-abc.apps.googleusercontent.com",
                "SIWA_GOOGLE_RISC_CONFIGURATION_URL": nginx.jwks_url.rsplit("/", 1)[0] + "/risc-configuration",
                **topology})
            serve = ServeProcess(binary, env_file, socket_path, serve_dir / "serve.log")
            started.append(serve)

            def ready():
                status, _ = fastcgi_request(socket_path, "GET", "/healthz/ready", timeout=5)
                return status == 200

            # Ready: the keys are loaded (the JWKS age is served) and Redis was reached.
            assert wait_until(ready, timeout=20), serve.log_text()
            # One request, so that the labelled families have a sample.
            fastcgi_request(socket_path, "POST", "/apple/notifications", b"not a token", timeout=5)
            status, body = fastcgi_request(socket_path, "GET", "/metrics", timeout=10)
            assert status == 200
            texts.append(body.decode())
        return [served_names(text) for text in texts]
    finally:
        for process in reversed(started):
            process.stop()


def test_every_metric_a_query_names_is_served(served_metrics):
    sentinel, cluster = served_metrics
    served = sentinel | cluster
    used = set().union(*(metric_names(expr) for _, expr in queries()))
    assert used - DELIVERER_METRICS, "no responder metric used"
    missing = (used - DELIVERER_METRICS) - served
    assert not missing, f"queried but not served by /metrics: {sorted(missing)}"
    # The topology's own families come from their own topology only.
    assert "siwa_redis_failovers_total" in sentinel - cluster
    assert "siwa_redis_cluster_primary_changes_total" in cluster - sentinel
    assert not DELIVERER_METRICS & served
    assert {"siwa_google_client_events_total", "siwa_google_client_silence_seconds", "siwa_google_keys"} <= used
