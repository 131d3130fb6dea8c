"""Google's Cross-Account Protection through the shipped nginx site, with real TLS: the
real `siwa-endpoint serve` fetching Google's issuer and keys from a stand-in of the
`risc-configuration` document (HTTPS under the test CA), SETs signed by the test kit
(`sign --google`) pushed to /google/risc as Google pushes them, and the Redis state."""

import http.server
import json
import ssl
import threading
import time

import pytest

from deploy_harness import free_port, run
from stack import KEY_ID, RealStack, find_binary, build_binary

GOOGLE_CLIENT_ID = "1234567890-e2e.apps.googleusercontent.com"
GOOGLE_PATH = "/google/risc"
ISSUER = "https://accounts.google.com/"
RISC = "https://schemas.openid.net/secevent/risc/event-type/"


class GoogleStandIn:
    """Google's discovery document and JWKS over HTTPS on loopback, under the test CA."""

    def __init__(self, cert, key, jwks_file):
        self.port = free_port()
        documents = {
            "/.well-known/risc-configuration": json.dumps(
                {"issuer": ISSUER, "jwks_uri": f"https://127.0.0.1:{self.port}/oauth2/v3/certs"}).encode(),
            "/oauth2/v3/certs": jwks_file.read_bytes(),
        }

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = documents.get(self.path)
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def configuration_url(self):
        return f"https://127.0.0.1:{self.port}/.well-known/risc-configuration"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def google_stack(workdir, pki, rsa_cert, request):
    binary = find_binary() or build_binary()
    standins = []

    def settings(kit):
        standin = GoogleStandIn(*rsa_cert, kit / "test-jwks.json")
        standins.append(standin)
        return {"SIWA_GOOGLE_CLIENT_IDS": GOOGLE_CLIENT_ID,
                "SIWA_GOOGLE_RISC_CONFIGURATION_URL": standin.configuration_url}

    stack = RealStack(workdir / "google-e2e", binary, pki.ca_cert, *rsa_cert, extra_settings=settings)
    yield stack
    stack.stop()
    for standin in standins:
        standin.stop()


def sign(stack, event_type, sub, jti, **options):
    args = [str(stack.binary), "sign", "--google", "--key", str(stack.signing_key), "--kid", KEY_ID, "--type",
            event_type, "--sub", sub, "--client-id", GOOGLE_CLIENT_ID, "--jti", jti]
    for name, value in options.items():
        args += [f"--{name}", str(value)]
    return run(args).stdout.strip().encode()


def push(stack, token, content_type="application/secevent+jwt"):
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    return stack.request("POST", GOOGLE_PATH, body=token, headers=headers)


def google_user(stack, sub):
    return stack.redis.hgetall(f"siwa:google:user:{{{GOOGLE_CLIENT_ID}:{sub}}}")


def test_sessions_revoked_is_202_with_no_body_and_lands_in_redis(google_stack):
    sub = "110248495921238986420"
    iat = int(time.time()) - 5
    status, headers, body = push(google_stack, sign(google_stack, "sessions-revoked", sub, "g-e2e-1", iat=iat))
    assert (status, body) == (202, b"")
    assert headers["strict-transport-security"] == "max-age=63072000"
    stored = google_user(google_stack, sub)
    assert stored["sessions_revoked_at"] == str(iat * 1000)
    assert stored["last_jti"] == "g-e2e-1"
    # Sent again: answered as if new, nothing more written.
    assert push(google_stack, sign(google_stack, "sessions-revoked", sub, "g-e2e-1", iat=iat))[:3:2] == (202, b"")


def test_account_disabled_for_hijacking_then_enabled(google_stack):
    sub = "110248495921238986421"
    now = int(time.time())
    token = sign(google_stack, "account-disabled", sub, "g-e2e-2", iat=now - 10, reason="hijacking")
    assert push(google_stack, token)[0] == 202
    stored = google_user(google_stack, sub)
    assert (stored["account_disabled"], stored["account_disabled_reason"]) == ("true", "hijacking")
    assert stored["sessions_revoked_at"] == str((now - 10) * 1000)
    assert push(google_stack, sign(google_stack, "account-enabled", sub, "g-e2e-3", iat=now - 5))[0] == 202
    stored = google_user(google_stack, sub)
    assert stored["account_disabled"] == "false" and "account_disabled_reason" not in stored


@pytest.mark.parametrize("case, err", [
    ("wrong-issuer", "invalid_issuer"),
    ("other-client", "invalid_audience"),
    ("not-a-token", "invalid_request"),
    ("json-content-type", "invalid_request"),
    ("no-content-type", "invalid_request"),
])
def test_refusals_are_400_with_their_rfc8935_code(google_stack, case, err):
    sub = "110248495921238986422"
    jti = f"g-e2e-refused-{case}"
    token = sign(google_stack, "sessions-revoked", sub, jti)
    content_type = "application/secevent+jwt"
    if case == "wrong-issuer":
        token = sign(google_stack, "sessions-revoked", sub, jti, issuer="https://accounts.google.com")
    elif case == "other-client":
        token = run([str(google_stack.binary), "sign", "--google", "--key", str(google_stack.signing_key), "--kid",
                     KEY_ID, "--type", "sessions-revoked", "--sub", sub, "--client-id",
                     "999-other.apps.googleusercontent.com", "--jti", jti]).stdout.strip().encode()
    elif case == "not-a-token":
        token = b"not.a.token"
    elif case == "json-content-type":
        content_type = "application/json"
    elif case == "no-content-type":
        content_type = None
    status, headers, body = push(google_stack, token, content_type)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert headers["content-language"] == "en"
    answer = json.loads(body)
    assert set(answer) == {"err", "description"} and answer["err"] == err
    assert google_stack.redis.cli("EXISTS", f"siwa:google:user:{{{GOOGLE_CLIENT_ID}:{sub}}}").strip() == "0"
    assert google_stack.redis.cli("EXISTS", f"siwa:google:seen:{jti}").strip() == "0"


def test_other_methods_are_405(google_stack):
    status, headers, _ = google_stack.request("GET", GOOGLE_PATH)
    assert status == 405 and headers["allow"] == "POST"
