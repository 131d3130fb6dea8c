"""End to end with real parts only: notifications signed by the test kit, posted over
TLS through the shipped nginx site to the real `siwa-endpoint serve`, landing in a
real redis-server; check-endpoint against that stack; and scripts/run-local --once."""

import http.client
import json
import pathlib
import re
import shutil
import socket
import ssl
import subprocess
import time

import pytest

from deploy_harness import CHECK_ENDPOINT, REPO, free_port
from stack import NOTIFICATION_PATH, RealStack, build_binary, find_binary, wait_until

RUN_LOCAL = REPO / "scripts" / "run-local"
TYPES = ["email-disabled", "email-enabled", "consent-revoked", "account-deleted"]
# The test kit's demo address: a test value, never a real user's.
DEMO_EMAIL = "relay-demo@privaterelay.appleid.com"


@pytest.fixture(scope="session")
def endpoint_binary():
    return find_binary() or build_binary()


@pytest.fixture(scope="module")
def real_stack(workdir, pki, rsa_cert, endpoint_binary):
    stack = RealStack(workdir / "e2e", endpoint_binary, pki.ca_cert, *rsa_cert)
    yield stack
    stack.stop()


def now_ms():
    return int(time.time() * 1000)


def email_options(event_type):
    return {"email": DEMO_EMAIL, "private": True} if event_type.startswith("email-") else {}


# ---------------------------------------------------------------- notifications


def test_consent_revoked_lands_in_redis_and_a_repeat_is_a_duplicate(real_stack):
    sub = "000100.e2e0000000000000000000000000000000.0001"
    event_time = now_ms() - 5000
    body = real_stack.sign("consent-revoked", sub, event_time_ms=event_time, jti="e2e-consent-0001")
    before = now_ms()
    status, headers, answer = real_stack.post(body)
    after = now_ms()

    assert (status, json.loads(answer)) == (200, {"status": "applied"})
    assert headers["strict-transport-security"] == "max-age=63072000"
    stored = real_stack.user(sub)
    updated_at = int(stored.pop("updated_at"))
    assert before <= updated_at <= after
    time_text = str(event_time)
    assert stored == {
        "consent_revoked_at": time_text,
        "sessions_revoked_at": time_text,
        "last_event_type": "consent-revoked",
        "last_event_at": time_text,
        "last_jti": "e2e-consent-0001",
    }

    status, _, answer = real_stack.post(body)
    assert (status, json.loads(answer)) == (200, {"status": "duplicate"})
    assert real_stack.user(sub) == {**stored, "updated_at": str(updated_at)}


def test_a_header_line_the_client_repeats_still_reaches_the_responder(real_stack):
    """nginx before 1.23 (Debian 12's 1.22) passes a header line a client repeated as two
    parameters of one name; the responder joins them, as nginx 1.23 does, instead of
    closing the connection, which nginx would answer 502 and count against the upstream."""
    sub = "000100.e2e0000000000000000000000000000000.0034"
    body = real_stack.sign("consent-revoked", sub, event_time_ms=now_ms() - 5000, jti="e2e-repeated-header")
    context = ssl.create_default_context(cafile=str(real_stack.ca_cert))
    connection = http.client.HTTPSConnection("localhost", real_stack.nginx.https_port, context=context, timeout=10)
    try:
        connection.putrequest("POST", NOTIFICATION_PATH)
        for name, value in [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                            ("X-Repeated", "a"), ("X-Repeated", "b")]:
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        status, answer = response.status, response.read()
    finally:
        connection.close()
    assert (status, json.loads(answer)) == (200, {"status": "applied"})
    assert real_stack.user(sub)["last_event_type"] == "consent-revoked"


@pytest.mark.parametrize("event_type", TYPES)
def test_each_type_through_nginx_and_tls(real_stack, event_type):
    sub = f"000200.e2e0000000000000000000000000000000.{TYPES.index(event_type) + 1:04d}"
    status, _, answer = real_stack.post(real_stack.sign(event_type, sub, **email_options(event_type)))
    assert (status, json.loads(answer)) == (200, {"status": "applied"})
    stored = real_stack.user(sub)
    assert stored["last_event_type"] == event_type
    expected_forwarding = {"email-disabled": "disabled", "email-enabled": "enabled",
                           "account-deleted": "disabled"}.get(event_type)
    assert stored.get("email_forwarding") == expected_forwarding
    assert stored.get("email") == (DEMO_EMAIL if event_type.startswith("email-") else None)


def test_logs_hold_no_email_and_no_token(real_stack):
    body = real_stack.sign("email-enabled", "000300.e2e.0001", email=DEMO_EMAIL, private=True)
    status, headers, _ = real_stack.post(body)
    assert status == 200
    token = json.loads(body)["payload"]
    signature = token.rsplit(".", 1)[1]
    # An absence is only proven once the lines about this request are written: wait
    # for its request id in the responder's log and in nginx's access log (nginx
    # writes that line when it finalises the request, after the answer is sent).
    request_id = headers["x-request-id"]
    access_log = real_stack.nginx.access_log_path
    assert wait_until(lambda: request_id in real_stack.serve.log_text()
                      and access_log.exists() and request_id in access_log.read_text(), 10), request_id
    logs = real_stack.serve.log_text() + access_log.read_text()
    assert DEMO_EMAIL not in logs
    assert signature not in logs


# ---------------------------------------------------------------- refusals and health


def test_get_on_the_notification_path_is_405(real_stack):
    status, headers, _ = real_stack.request("GET", "/apple/notifications")
    assert status == 405
    assert headers["allow"] == "POST"


def test_body_over_64k_is_413_from_nginx(real_stack):
    requests_before = len(real_stack.serve.log_events("request"))
    status, headers, answer = real_stack.post(b" " * (65 * 1024))
    assert status == 413
    # nginx's own page, not the responder's JSON, and the responder saw nothing.
    assert headers["content-type"] == "text/html"
    assert b"413 Request Entity Too Large" in answer
    assert len(real_stack.serve.log_events("request")) == requests_before


def test_unsigned_body_is_refused_by_the_responder(real_stack):
    status, headers, answer = real_stack.post(b'{"payload":"a.b.c"}')
    assert status == 400
    assert headers["content-type"].startswith("application/json")
    assert json.loads(answer) == {"status": "refused", "error": "token_not_base64url"}
    # The responder logged it under nginx's request id.
    logged = [line for line in real_stack.serve.log_events("request")
              if line.get("request_id") == headers["x-request-id"]]
    assert [(line["status"], line["error"]) for line in logged] == [(400, "token_not_base64url")]


def test_healthz_through_nginx_from_loopback(real_stack):
    status, headers, answer = real_stack.request("GET", "/healthz")
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    assert json.loads(answer) == {"status": "ok", "keys": 1, "redis": "ok", "spool_depth": 0}


def test_check_endpoint_passes_on_the_real_stack(real_stack):
    result = subprocess.run([str(CHECK_ENDPOINT), real_stack.url, "--ca-file", str(real_stack.ca_cert)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()
            if len(line.split()) >= 2 and line.split()[1] in ("PASS", "WARN", "FAIL")}
    assert rows["post-unsigned"] == "PASS"
    assert rows["cert-chain"] == "PASS"
    assert "FAIL" not in rows.values()
    assert re.search(r"post-unsigned\s+PASS\s+400 in \d+ ms", result.stdout)


def test_check_endpoint_summary_per_client_id(real_stack):
    """--metrics: a row per client ID from the responder's figures; Apple-signed notifications
    for an unlisted aud FAIL as a deployment fault."""
    metrics = f"https://localhost:{real_stack.nginx.https_port}/metrics"
    command = [str(CHECK_ENDPOINT), real_stack.url, "--ca-file", str(real_stack.ca_cert), "--metrics", metrics]
    status, _, _ = real_stack.post(real_stack.sign("email-enabled", "000028.e2e.0001", email=DEMO_EMAIL, private=True))
    assert status == 200
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"notifications:com\.example\.app\s+PASS\s+last genuine notification \d+ s ago; \d+ since start;"
                     r" refused: ", result.stdout), result.stdout
    assert re.search(r"aud-not-listed\s+PASS\s+", result.stdout), result.stdout

    status, _, _ = real_stack.post(real_stack.sign("consent-revoked", "000028.e2e.0002", client_id="com.other.unlisted"))
    assert status == 403
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"aud-not-listed\s+FAIL\s+1 Apple-signed notifications refused for a client ID not in "
                     r"SIWA_CLIENT_IDS", result.stdout), result.stdout
    assert "com.other.unlisted" not in result.stdout


# ---------------------------------------------------------------- scripts/run-local


def port_is_bound(port):
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", port))
        return False
    except OSError:
        return True
    finally:
        probe.close()


def test_run_local_once(workdir, endpoint_binary):
    port = free_port()
    temp = workdir / "run-local"
    temp.mkdir()
    # --binary: the test does not time a release build; TMPDIR: leftovers stay in workdir.
    result = subprocess.run(
        [str(RUN_LOCAL), "--once", "--port", str(port), "--binary", str(endpoint_binary)],
        capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR": str(temp)})
    output = result.stdout
    assert result.returncode == 0, output[-3000:] + result.stderr

    # One block per type: the response, then the user's hash, one field per line.
    blocks = re.split(r"\n(?=(?:email-disabled|email-enabled|consent-revoked|account-deleted) \(sub )", output)
    by_type = {block.split(" ", 1)[0]: block for block in blocks[1:]}
    assert sorted(by_type) == sorted(TYPES)
    expected = {
        "email-disabled": {"email_forwarding": "disabled", "email": DEMO_EMAIL, "is_private_email": "true"},
        "email-enabled": {"email_forwarding": "enabled", "email": DEMO_EMAIL, "is_private_email": "true"},
        "consent-revoked": {},
        "account-deleted": {"email_forwarding": "disabled"},
    }
    for event_type, block in by_type.items():
        assert 'response: HTTP 200 {"status":"applied"}' in block
        fields = dict(re.findall(r"^    (\w+) +(\S+)$", block, flags=re.MULTILINE))
        assert fields["last_event_type"] == event_type
        for name, value in expected[event_type].items():
            assert fields[name] == value, f"{event_type}: {name}"
        times = {"consent-revoked": "consent_revoked_at", "account-deleted": "account_deleted_at"}
        if event_type in times:
            assert fields[times[event_type]] == fields["last_event_at"] == fields["sessions_revoked_at"]
            assert "email" not in fields
    assert "events stream siwa:events holds 4 entries" in output
    assert "0 FAIL," in output
    assert 'GET /healthz through nginx: {"status":"ok","keys":1,"redis":"ok","spool_depth":0}' in output

    # Everything stopped; the directory with the logs is kept and named.
    assert not port_is_bound(port)
    kept = re.search(r"^logs and files kept in (\S+)$", output, flags=re.MULTILINE).group(1)
    assert kept.startswith(str(temp))
    applied = [json.loads(line) for line in open(f"{kept}/logs/serve.log") if '"outcome":"applied"' in line]
    assert sorted(line["type"] for line in applied) == sorted(TYPES)
    assert list((pathlib.Path(kept) / "run").iterdir()) == [], "serve's socket was not removed"
    shutil.rmtree(kept)


def test_run_local_refuses_a_busy_port(workdir, endpoint_binary):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [str(RUN_LOCAL), "--once", "--port", str(port), "--binary", str(endpoint_binary)],
            capture_output=True, text=True, timeout=60, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert result.returncode == 1
    assert f"port {port} is already in use" in result.stderr
    assert "logs and files kept" not in result.stdout
