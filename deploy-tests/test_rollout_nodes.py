"""scripts/rollout on the nodes layout (nginx/siwa-endpoint-upstream-nodes.conf): two
real `siwa-endpoint serve` nodes (--manager direct), a real redis-server, nginx rendered
from the shipped files (TLS on loopback). The test client stands in for Apple. Each
release is a small wrapper script that runs the same binary: a distinct file, so a
distinct release, and the same code."""

import http.client
import json
import os
import pathlib
import signal
import ssl
import subprocess
import time

import pytest

from deploy_harness import NGINX_DIR
from fault_under_load import PacedLoad
from rollout_stack import RedisGate, RolloutStack, process_alive, wait_for
from stack import build_binary, find_binary

NODES_FILE = NGINX_DIR / "siwa-endpoint-upstream-nodes.conf"
NODE_HEALTH_FILE = NGINX_DIR / "siwa-endpoint-node-health.conf"
ALLOW_FILE = NGINX_DIR / "siwa-endpoint-health-allow.conf"
NODES = ("node-1", "node-2")


def release_of(directory, binary, name, prefix=""):
    """A release: a script that runs `binary` (with `prefix` settings in its environment)."""
    path = directory / name
    path.write_text(f"#!/bin/sh\n# {name}\n{prefix}exec {binary} \"$@\"\n")
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def binary():
    return find_binary() or build_binary()


@pytest.fixture(scope="module")
def stack(workdir, binary, rsa_cert):
    nodes_stack = RolloutStack(workdir / "rollout-nodes", binary, *rsa_cert)
    try:
        # The shipped nodes upstream file, with this stack's socket directory.
        upstream = NODES_FILE.read_text().replace("unix:/run/siwa-endpoint/", f"unix:{nodes_stack.socket_dir}/")
        assert all(f"unix:{nodes_stack.socket(node)} " in upstream for node in NODES), upstream
        nodes_stack.upstream_file.write_text(upstream)
        first = nodes_stack.rollout(release_of(workdir, binary, "release-a"))
        assert first.returncode == 0, first.stdout + first.stderr
        assert "nodes layout: node-1 node-2" in first.stdout
        assert all(process_alive(nodes_stack.pid(node)) for node in NODES)
        yield nodes_stack
    finally:
        nodes_stack.stop()


def links(stack):
    return {name: os.readlink(stack.lib_dir / f"current-{name}") for name in (*NODES, "live")}


def served(stack, node):
    return sum(1 for line in stack.log_lines(node) if line.get("path") == "/apple/notifications")


def test_nodes_rollout_under_traffic_answers_every_notification_and_loses_none(stack, workdir, binary):
    old_pids = {node: stack.pid(node) for node in NODES}
    old_release = links(stack)["live"]
    stream_before = stack.stream_length()
    served_before = {node: served(stack, node) for node in NODES}
    error_log = stack.nginx.log_dir / "siwa-endpoint.error.log"
    error_log_before = error_log.stat().st_size if error_log.exists() else 0

    # A paced stream (3 threads, 10 a second each, a fresh TLS connection each) that
    # starts before the rollout and goes on until after it, as the slot rollout's test.
    subs, bodies = stack.sign_count(f"000{int(time.time())}.nodesrollout", 3000)
    load = PacedLoad(stack.post, bodies, threads=3, interval=0.1, minimum=300, after=10)
    result = load.run(lambda _: stack.rollout(release_of(workdir, binary, "release-b"), timeout=180), fault_after=30)
    indexes = sorted(load.sent)
    count = len(indexes)
    subs = [subs[index] for index in indexes]
    answers = [load.answers[index] for index in indexes]
    moments = [load.answered_at[index] for index in indexes if load.answered_at[index] is not None]

    assert result.returncode == 0, result.stdout + result.stderr
    assert load.errors == []
    non_2xx = [(subs[i], answer) for i, answer in enumerate(answers) if answer is None or not 200 <= answer[0] < 300]
    assert non_2xx == []
    assert [answer[1] for answer in answers] == [{"status": "applied"}] * count
    assert any(moment < load.fault_started for moment in moments)
    assert any(moment > load.fault_finished for moment in moments)

    # Every notification answered is in Redis, once.
    assert [sub for sub in subs if not stack.user_exists(sub)] == []
    assert stack.stream_length() - stream_before == count
    assert sum(served(stack, node) - served_before[node] for node in NODES) == count

    # Each node was taken out of nginx, drained, stopped, and runs the new release.
    new = links(stack)
    assert new["live"] != old_release and new["live"].startswith("releases/")
    assert new["node-1"] == new["node-2"] == new["live"]
    assert os.readlink(stack.lib_dir / "current-previous") == old_release
    for node in NODES:
        assert wait_for(lambda: not process_alive(old_pids[node]), 30)
        assert stack.pid(node) != old_pids[node] and process_alive(stack.pid(node))
        assert f"nginx no longer sends to {node}" in result.stdout
        assert f"spool depth of {node}: 0" in result.stdout
        assert stack.spool_status(node)["depth"] == 0
    # nginx never tried a node while it was stopped: it had been taken out first (a try
    # would be logged as a failed connect() to its socket, then passed to the other node).
    with open(error_log, "rb") as log:
        log.seek(error_log_before)
        new_errors = log.read().decode(errors="replace")
    assert [line for line in new_errors.splitlines() if any(str(stack.socket(node)) in line for node in NODES)] == []
    # One node at a time: node-2 was taken out only once node-1 served the new release.
    assert result.stdout.index("node-1 serves release") < result.stdout.index("nginx no longer sends to node-2")
    server_lines = [line.strip() for line in stack.upstream_file.read_text().splitlines()
                    if line.strip().startswith("server ")]
    assert server_lines == [f"server unix:{stack.socket(node)} max_fails=1 fail_timeout=5s;" for node in NODES]
    # Both nodes serve after the rollout.
    after_rollout = {node: served(stack, node) for node in NODES}
    for index in range(20):
        sub = f"000{int(time.time())}.nodesafter.{index}"
        assert stack.post(stack.sign(sub)) == (200, {"status": "applied"})
    assert all(served(stack, node) > after_rollout[node] for node in NODES)


def test_a_node_failing_its_health_check_stops_the_rollout_and_goes_back(stack, workdir, binary):
    # Serves, but cannot reach Redis (the environment wins over the env file): /healthz 503.
    unhealthy = release_of(workdir, binary, "release-unhealthy", "SIWA_REDIS_URL=redis://127.0.0.1:1/0 ")
    before_links = links(stack)
    before_upstream = stack.upstream_file.read_bytes()
    node2_pid = stack.pid("node-2")
    result = stack.rollout(unhealthy, "--health-timeout", "3", timeout=180)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "node-1 was not healthy within 3s" in result.stdout
    assert f"rollout stopped at node-1: it is back on {before_links['node-1']} and serves" in result.stderr
    assert "nginx no longer sends to node-2" not in result.stdout
    assert links(stack) == before_links
    assert stack.upstream_file.read_bytes() == before_upstream
    assert stack.pid("node-2") == node2_pid and process_alive(node2_pid)
    assert process_alive(stack.pid("node-1"))
    sub = f"000{int(time.time())}.nodesback"
    assert stack.post(stack.sign(sub)) == (200, {"status": "applied"})
    assert stack.user_exists(sub)


def test_rollback_rolls_the_previous_release_out_node_by_node(stack):
    before = links(stack)
    previous = os.readlink(stack.lib_dir / "current-previous")
    assert previous != before["live"]
    # --rollback takes no --binary (rollout_args passes one: it is dropped).
    args = stack.rollout_args()
    at = args.index("--binary")
    del args[at:at + 2]
    result = subprocess.run([*args, "--rollback"], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"rolling back to {previous}" in result.stdout
    after = links(stack)
    assert after["node-1"] == after["node-2"] == after["live"] == previous
    assert os.readlink(stack.lib_dir / "current-previous") == before["live"]
    for node in NODES:
        assert f"nginx no longer sends to {node}" in result.stdout
    sub = f"000{int(time.time())}.nodesrolledback"
    assert stack.post(stack.sign(sub)) == (200, {"status": "applied"})


# ---- Health of one node, and of the host for a load balancer --------------------------

def get(stack, path, source="127.0.0.1"):
    """GET through nginx over TLS from a loopback source address: (status, body)."""
    context = ssl.create_default_context(cafile=str(stack.ca_cert))
    connection = http.client.HTTPSConnection("localhost", stack.nginx.https_port, context=context, timeout=15,
                                             source_address=(source, 0))
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def nginx_workers(stack):
    master = stack.nginx.pid_file.read_text().strip()
    workers = set()
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[1] == master:
            workers.add(int(stat.parent.name))
    return workers


def reload_nginx(stack, until):
    """Reloads nginx, waits for the old workers to exit (none answers with the old
    configuration any more), then until `until()` holds."""
    old = nginx_workers(stack)
    subprocess.run(stack.nginx.nginx_args("-s", "reload"), check=True, capture_output=True, timeout=30)
    assert wait_for(lambda: not any(process_alive(pid) for pid in old), 30, 0.1)
    assert wait_for(until, 30, 0.2)


def test_a_node_and_the_host_are_checked_through_nginx(stack):
    # The shipped per-node locations, with this stack's sockets; no allow list yet.
    node_health = NODE_HEALTH_FILE.read_text().replace("unix:/run/siwa-endpoint/", f"unix:{stack.socket_dir}/")
    assert all(f"unix:{stack.socket(node)};" in node_health for node in NODES), node_health
    (stack.nginx.conf_dir / "siwa-endpoint-node-health.conf").write_text(node_health)
    reload_nginx(stack, lambda: get(stack, "/healthz/node-1")[0] == 200)

    for node in NODES:
        status, body = get(stack, f"/healthz/{node}")
        assert status == 200 and json.loads(body)["status"] == "ok", body
    assert get(stack, "/healthz/balancer") == (200, b"healthy\n")
    # Another address (127.0.0.2 stands for a load balancer on another host): refused
    # everywhere until the allow list names it.
    for path in ("/healthz", "/healthz/node-1", "/healthz/balancer", "/healthz/any-node"):
        assert get(stack, path, source="127.0.0.2")[0] in (403, 404), path
    assert get(stack, "/healthz/balancer", source="127.0.0.2")[0] == 403

    allow = ALLOW_FILE.read_text() + "allow 127.0.0.2;\n"
    (stack.nginx.conf_dir / "siwa-endpoint-health-allow.conf").write_text(allow)
    reload_nginx(stack, lambda: get(stack, "/healthz/balancer", source="127.0.0.2")[0] == 200)
    assert get(stack, "/healthz/balancer", source="127.0.0.2") == (200, b"healthy\n")
    assert get(stack, "/healthz", source="127.0.0.2")[0] == 403
    assert get(stack, "/healthz/node-1", source="127.0.0.2")[0] == 403
    assert get(stack, "/healthz/any-node", source="127.0.0.2")[0] == 404

    # node-2 stopped: its own check says so, the host's still says healthy (node-1 is).
    node2 = stack.pid("node-2")
    os.kill(node2, signal.SIGTERM)
    assert wait_for(lambda: not process_alive(node2), 30)
    assert get(stack, "/healthz/node-2")[0] == 502
    assert get(stack, "/healthz/node-1")[0] == 200
    for _ in range(4):
        assert get(stack, "/healthz/balancer", source="127.0.0.2") == (200, b"healthy\n")
    # Both stopped: unhealthy, one word.
    node1 = stack.pid("node-1")
    os.kill(node1, signal.SIGTERM)
    assert wait_for(lambda: not process_alive(node1), 30)
    assert get(stack, "/healthz/balancer", source="127.0.0.2") == (503, b"unhealthy\n")
    assert get(stack, "/healthz/node-1")[0] == 502

    # A rollout starts stopped nodes again (nothing to take out of nginx first).
    result = stack.rollout(None, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "node-1 was not running" in result.stdout and "node-2 was not running" in result.stdout
    assert get(stack, "/healthz/balancer", source="127.0.0.2") == (200, b"healthy\n")


def test_installed_mode_restarts_each_node_on_the_installed_binary(stack, workdir, binary):
    # The package's switch (`rollout --installed`, run by its postinst on an upgrade):
    # no release, no link; each node restarted on the installed binary, one by one.
    before = links(stack)
    old_pids = {node: stack.pid(node) for node in NODES}
    installed = release_of(workdir, binary, "installed-binary", "RELEASE_MARK=installed ")
    result = stack.rollout(installed, "--installed", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert links(stack) == before
    for node in NODES:
        assert f"nginx no longer sends to {node}" in result.stdout
        pid = stack.pid(node)
        assert pid != old_pids[node] and process_alive(pid)
        assert b"RELEASE_MARK=installed" in pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    sub = f"000{int(time.time())}.nodesinstalled"
    assert stack.post(stack.sign(sub)) == (200, {"status": "applied"})


def test_a_nodes_spool_is_drained_before_the_node_stops(stack, workdir, binary):
    # node-1 reaches Redis only through a gate the test holds (a wrapper that sets the
    # Redis URL for node-1's socket only: the environment wins over the env file); node-2
    # goes straight, so it stays healthy and node-1 may be taken out. Gate shut, node-1
    # answers `200 spooled`; the gate opens only once the rollout says it waits.
    gate = RedisGate(stack.redis.port)
    try:
        gated = gate.wrap(workdir / "gated-node-1", binary, only_socket="node-1.sock")
        onto_gate = stack.rollout(gated, timeout=180)
        assert onto_gate.returncode == 0, onto_gate.stdout + onto_gate.stderr
        assert gate.relayed > 0
        node1 = stack.pid("node-1")

        gate.shut()
        subs, bodies = stack.sign_count(f"000100.nodedrain{time.time_ns()}", 16)
        stream_before = stack.stream_length()
        answers = [stack.post(body) for body in bodies]
        assert {answer[0] for answer in answers} == {200}
        spooled = [sub for sub, answer in zip(subs, answers) if answer[1] == {"status": "spooled"}]
        applied = [sub for sub, answer in zip(subs, answers) if answer[1] == {"status": "applied"}]
        assert len(spooled) + len(applied) == len(subs) and spooled, answers
        assert stack.spool_status("node-1")["depth"] == len(spooled)
        assert not any(stack.user_exists(sub) for sub in spooled)

        def while_waiting():
            assert process_alive(node1)
            assert not any(stack.user_exists(sub) for sub in spooled)
            gate.open()

        returncode, output = stack.rollout_held(f"node-1 holds {len(spooled)} spooled notifications: waiting",
                                                while_waiting)
        assert returncode == 0, output
        assert "spool depth of node-1: 0" in output
        assert not process_alive(node1)
        stream = stack.stream_subs()
        assert [stream.count(sub) for sub in subs] == [1] * len(subs)
        assert stack.stream_length() - stream_before == len(subs)
        status = stack.spool_status("node-1")
        assert (status["depth"], status["set_aside"], status["torn_files"]) == (0, 0, 0)
    finally:
        gate.stop()


def node_healthy(binary, stack, node):
    return subprocess.run([str(binary), "status", "--socket", str(stack.socket(node)), "--timeout", "5"],
                          capture_output=True, timeout=30).returncode == 0


def test_no_node_is_taken_out_while_no_other_node_is_healthy(stack, workdir, binary):
    # node-2 runs but is unhealthy (its way to Redis, through a gate, shut): node-1 (the
    # first running node) must not be taken out, since nothing healthy would be left.
    gate = RedisGate(stack.redis.port)
    try:
        gated = gate.wrap(workdir / "gated-node-2", binary, only_socket="node-2.sock")
        onto_gate = stack.rollout(gated, timeout=180)
        assert onto_gate.returncode == 0, onto_gate.stdout + onto_gate.stderr
        gate.shut()
        assert wait_for(lambda: not node_healthy(binary, stack, "node-2"), 30, 0.2)
        # The host is healthy while one node is: nginx asks the next node on a 503.
        for _ in range(6):
            assert get(stack, "/healthz/balancer") == (200, b"healthy\n")
        before_links = links(stack)
        before_upstream = stack.upstream_file.read_bytes()
        pids = {node: stack.pid(node) for node in NODES}
        result = stack.rollout(release_of(workdir, binary, "release-c"), timeout=180)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "no node but node-1 is healthy: taking node-1 out would leave none" in result.stderr
        assert {node: stack.pid(node) for node in NODES} == pids
        assert all(process_alive(pid) for pid in pids.values())
        assert links(stack) == before_links
        assert stack.upstream_file.read_bytes() == before_upstream
        gate.open()
        assert wait_for(lambda: node_healthy(binary, stack, "node-2"), 30, 0.2)
        # Healthy again: a rollout onto the plain binary goes through, off the gate.
        again = stack.rollout(timeout=180)
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        gate.stop()
    assert all(node_healthy(binary, stack, node) for node in NODES)
