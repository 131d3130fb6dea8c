"""`siwa-endpoint canary` end to end: real redis-server, real serve, real nginx with the
shipped site under TLS, and the stand-in for Apple's /auth/revoke playing both of Apple's
sides (it answers the revocation, then posts a signed consent-revoked through nginx after
a delay, or never). Each outcome has its exit status."""

import json
import subprocess
import sys
import time

import pytest

from deploy_harness import REPO, free_port, run
from stack import CLIENT_ID, KEY_ID, RealStack, build_binary, find_binary

STANDIN = REPO / "deploy-tests" / "standins" / "apple_token_standin.py"
TEAM_ID = "TEAMID1234"
APPLE_KEY_ID = "KEYID56789"
ARRIVES, SILENT = "rt.canary-arrives.7f3e1c", "rt.canary-silent.9a2b4d"
SUB_ARRIVES, SUB_SILENT = "000028.canary.0001", "000028.canary.0002"


@pytest.fixture(scope="module")
def canary_stack(workdir, pki, rsa_cert):
    binary = find_binary() or build_binary()
    stack = RealStack(workdir / "canary", binary, pki.ca_cert, *rsa_cert)
    directory = workdir / "canary" / "apple"
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("AuthKey_TEST.p8", "AuthKey_OTHER.p8"):
        run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
             str(directory / name)])
    run(["openssl", "pkey", "-in", str(directory / "AuthKey_TEST.p8"), "-pubout", "-out", str(directory / "public.pem")])
    tokens = {
        ARRIVES: {"label": "arrives", "answer": "valid", "notify_after": 1.5, "sub": SUB_ARRIVES},
        SILENT: {"label": "silent", "answer": "valid"},
    }
    (directory / "tokens.json").write_text(json.dumps(tokens))
    cert, key = pki.leaf("standin-leaf")
    standin = subprocess.Popen(
        [sys.executable, str(STANDIN), "--cert", str(cert), "--key", str(key), "--public-key",
         str(directory / "public.pem"), "--team-id", TEAM_ID, "--key-id", APPLE_KEY_ID, "--client-ids", CLIENT_ID,
         "--tokens", str(directory / "tokens.json"), "--log", str(directory / "standin.log"),
         "--notify-url", stack.url, "--notify-ca", str(pki.ca_cert),
         "--sign-command", json.dumps([str(binary), "sign", "--key", str(stack.signing_key), "--kid", KEY_ID])],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = standin.stdout.readline()
    assert line.startswith("listening "), line
    stack.apple_dir = directory
    stack.revoke_url = f"https://localhost:{int(line.split()[1])}/auth/revoke"
    yield stack
    standin.kill()
    standin.wait(timeout=10)
    stack.stop()


def canary(stack, token, sub, timeout=30, arguments=(), **settings):
    environment = {
        "PATH": "/usr/bin:/bin",
        "SIWA_APPLE_TEAM_ID": TEAM_ID, "SIWA_APPLE_KEY_ID": APPLE_KEY_ID,
        "SIWA_APPLE_PRIVATE_KEY_FILE": str(stack.apple_dir / "AuthKey_TEST.p8"),
        "SIWA_APPLE_REVOKE_URL": stack.revoke_url, "SIWA_APPLE_CA_FILE": str(stack.ca_cert),
        "SIWA_REDIS_URL": stack.redis.url, **settings,
    }
    # The token on standard input, never an argument.
    return subprocess.run([str(stack.binary), "canary", "--client-id", CLIENT_ID, "--sub", sub, "--token-file", "-",
                           "--timeout", str(timeout), *arguments], input=token + "\n", env=environment,
                          capture_output=True, text=True, timeout=timeout + 30)


def standin_log(stack):
    path = stack.apple_dir / "standin.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_arrived_prints_the_time_from_revocation_to_applied(canary_stack):
    started = time.time()
    result = canary(canary_stack, ARRIVES, SUB_ARRIVES)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["outcome"] == "arrived" and summary["sub"] == SUB_ARRIVES
    # The stand-in waits 1.5 s before posting: the time measured covers it.
    assert 1.5 <= summary["seconds_to_applied"] < 30
    assert f"consent-revoked for {SUB_ARRIVES} applied " in result.stdout
    user = canary_stack.user(SUB_ARRIVES)
    assert int(user["consent_revoked_at"]) >= int(started * 1000) - 60_000
    assert user["last_event_type"] == "consent-revoked"
    # It came through nginx, verified by serve, and the token was never printed or logged.
    assert {"label": "arrives", "endpoint": "notify", "status": 200} in standin_log(canary_stack)
    assert ARRIVES not in result.stdout + result.stderr + canary_stack.serve.log_text()


def test_nothing_in_time_says_what_to_check(canary_stack):
    result = canary(canary_stack, SILENT, SUB_SILENT, timeout=5)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"no consent-revoked for {SUB_SILENT} was applied within 5 s" in result.stderr
    for hint in ("Server-to-Server Notification Endpoint", "SIWA_CLIENT_IDS", "certificate", "firewall",
                 "The token is spent"):
        assert hint in result.stderr
    assert canary_stack.redis.cli("EXISTS", f"siwa:user:{{{CLIENT_ID}:{SUB_SILENT}}}").strip() == "0"
    assert any(entry.get("label") == "silent" and entry.get("answer") == "valid" for entry in standin_log(canary_stack))


def test_apple_refusing_our_secret_is_exit_2(canary_stack):
    # invalid_client is a settings mistake (exit 2), as in reconcile, revoke and transfer.
    result = canary(canary_stack, SILENT, SUB_SILENT,
                    SIWA_APPLE_PRIVATE_KEY_FILE=str(canary_stack.apple_dir / "AuthKey_OTHER.p8"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Apple refused our client (invalid_client)" in result.stderr
    assert standin_log(canary_stack)[-1]["problem"] == "signature"


def test_apple_refusing_the_token_is_exit_4_and_json_is_one_document(canary_stack):
    # A token Apple did not issue (or already spent): Apple's refusal, not a usage mistake.
    result = canary(canary_stack, "rt.canary-unknown.5c1d0e", SUB_SILENT, arguments=["--json"])
    assert result.returncode == 4, result.stdout + result.stderr
    assert json.loads(result.stdout) == {"outcome": "refused", "sub": SUB_SILENT, "error": "invalid_grant"}
    assert result.stdout.count("\n") == 1
    assert "Apple refused the revocation (invalid_grant)" in result.stderr
    assert standin_log(canary_stack)[-1]["label"] == "unlisted"


def test_redis_unreachable_is_exit_3_and_spends_nothing(canary_stack):
    before = len(standin_log(canary_stack))
    result = canary(canary_stack, ARRIVES, SUB_ARRIVES, SIWA_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
                    SIWA_REDIS_TIMEOUT_MS="300")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Redis does not answer" in result.stderr and "the token is kept" in result.stderr
    assert len(standin_log(canary_stack)) == before  # nothing was sent to Apple


def test_a_token_is_never_an_argument(canary_stack):
    result = subprocess.run([str(canary_stack.binary), "canary", "--client-id", CLIENT_ID, "--sub", SUB_SILENT,
                             SILENT], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "never the command line" in result.stderr
