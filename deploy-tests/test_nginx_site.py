"""The shipped nginx site files, run by a real nginx with real certificates."""

import http.client
import socket
import subprocess
import ssl
import threading
import time
import warnings

import pytest

from deploy_harness import shipped_rate_limit
from stack import wait_until

NOTIFICATION = "/apple/notifications"
RSA_SUITES = ["ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384"]
ECDSA_SUITES = ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384"]
# A client's wait for a handshake or an answer: loopback takes milliseconds, but a loaded
# 2-core CI machine can stall a process for seconds; no test here is about client timing.
CLIENT_TIMEOUT = 30


def client_context(version=None, ciphers=None):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if ciphers:
        context.set_ciphers(ciphers)
    if version is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = version
            context.maximum_version = version
    return context


def handshake(stack, context, source="127.0.0.1"):
    raw = socket.create_connection(("127.0.0.1", stack.https_port), timeout=CLIENT_TIMEOUT,
                                   source_address=(source, 0))
    return context.wrap_socket(raw, server_hostname="localhost")


def request(stack, method, path, body=None, headers=None, source="127.0.0.1", host="127.0.0.1", ca=None):
    """One HTTPS request from the given loopback source address; returns
    (status, headers dict, body bytes)."""
    context = ssl.create_default_context(cafile=str(ca)) if ca else client_context()
    connection = http.client.HTTPSConnection(host, stack.https_port, context=context, timeout=CLIENT_TIMEOUT,
                                             source_address=(source, 0))
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


# ---------------------------------------------------------------- TLS


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["tls1.0", "tls1.1"])
def test_old_tls_versions_are_refused(rsa_stack, version):
    # @SECLEVEL=0 so that our own OpenSSL is willing to offer the old version:
    # the refusal must come from the server.
    context = client_context(version, "ALL:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError) as refused:
        handshake(rsa_stack, context).close()
    assert "PROTOCOL_VERSION" in str(refused.value) or "UNSUPPORTED_PROTOCOL" in str(refused.value)


def test_tls13_is_accepted(rsa_stack):
    with handshake(rsa_stack, client_context(ssl.TLSVersion.TLSv1_3)) as tls:
        assert tls.version() == "TLSv1.3"


@pytest.mark.parametrize("suite", ["AES128-GCM-SHA256", "AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA",
                                   "ECDHE-RSA-AES256-SHA384", "DHE-RSA-AES128-GCM-SHA256"])
def test_suites_outside_the_four_are_refused(rsa_stack, suite):
    # Non-forward-secret (AES*-GCM with RSA key exchange), ECDHE with CBC, and
    # DHE: all refused, although OpenSSL's defaults would take several of them.
    with pytest.raises(ssl.SSLError):
        handshake(rsa_stack, client_context(ssl.TLSVersion.TLSv1_2, f"{suite}:@SECLEVEL=0")).close()


@pytest.mark.parametrize("suite", RSA_SUITES)
def test_rsa_certificate_serves_the_ecdhe_rsa_suites(rsa_stack, suite):
    with handshake(rsa_stack, client_context(ssl.TLSVersion.TLSv1_2, suite)) as tls:
        assert tls.version() == "TLSv1.2"
        assert tls.cipher()[0] == suite


@pytest.mark.parametrize("suite", ECDSA_SUITES)
def test_ecdsa_certificate_serves_the_ecdhe_ecdsa_suites(ecdsa_stack, suite):
    with handshake(ecdsa_stack, client_context(ssl.TLSVersion.TLSv1_2, suite)) as tls:
        assert tls.version() == "TLSv1.2"
        assert tls.cipher()[0] == suite


def test_tls12_sessions_carry_no_ticket(rsa_stack):
    with handshake(rsa_stack, client_context(ssl.TLSVersion.TLSv1_2)) as tls:
        assert tls.session is not None
        assert not tls.session.has_ticket


def test_certificate_chain_verifies_for_localhost(rsa_stack, pki):
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    with handshake(rsa_stack, context) as tls:
        assert tls.getpeercert()["subject"] == ((("commonName", "localhost"),),)


# ---------------------------------------------------------------- HTTP


def test_plain_http_redirects_to_https_on_our_own_name(rsa_stack):
    connection = http.client.HTTPConnection("127.0.0.1", rsa_stack.http_port, timeout=CLIENT_TIMEOUT)
    try:
        connection.request("POST", NOTIFICATION + "?x=1", body=b"{}", headers={"Host": "attacker.example"})
        response = connection.getresponse()
        assert response.status == 301
        assert response.getheader("Location") == "https://siwa.example.com/apple/notifications?x=1"
    finally:
        connection.close()


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "HEAD"])
def test_notification_path_takes_only_post(rsa_stack, method):
    status, headers, _ = request(rsa_stack, method, NOTIFICATION)
    assert status == 405
    assert headers["allow"] == "POST"
    assert headers["strict-transport-security"] == "max-age=63072000"


def test_unsigned_notification_reaches_the_responder(rsa_stack):
    status, headers, body = request(rsa_stack, "POST", NOTIFICATION, body=b'{"payload":"a.b.c"}',
                                    headers={"Content-Type": "application/json"})
    assert status == 400
    assert b'"signature_invalid"' in body
    assert headers["strict-transport-security"] == "max-age=63072000"
    seen = rsa_stack.backend.seen()[-1]["params"]
    assert seen["REQUEST_METHOD"] == "POST"
    # nginx's request id reaches the responder and the client alike.
    assert seen["REQUEST_ID"] == headers["x-request-id"]
    assert len(seen["REQUEST_ID"]) == 32
    assert seen.get("HTTP_PROXY", "") == ""


def test_body_over_64k_is_refused_before_the_responder(rsa_stack):
    before = len(rsa_stack.backend.seen())
    status, _, _ = request(rsa_stack, "POST", NOTIFICATION, body=b"x" * (65 * 1024))
    assert status == 413
    assert len(rsa_stack.backend.seen()) == before


def test_body_just_under_64k_is_passed_whole(rsa_stack):
    status, _, _ = request(rsa_stack, "POST", NOTIFICATION, body=b"x" * (64 * 1024 - 1))
    assert status == 400
    assert rsa_stack.backend.seen()[-1]["body_length"] == 64 * 1024 - 1


@pytest.mark.parametrize("path", ["/", "/apple/notifications/", "/apple/notifications.json", "/apple",
                                  "/index.html", "/fcgi.sock"])
def test_everything_else_is_404(rsa_stack, path):
    status, _, _ = request(rsa_stack, "GET", path)
    assert status == 404


def test_access_log_is_json_without_bodies_or_query_strings(rsa_stack):
    marker_body = b'{"payload":"body.marker.value"}'
    status, headers, _ = request(rsa_stack, "POST", NOTIFICATION + "?email=someone%40example.com",
                                 body=marker_body)
    assert status == 400
    # nginx writes the log line after the response: waited for (bounded generously, a
    # loaded machine may delay nginx's worker), not assumed.
    def logged():
        return [line for line in rsa_stack.access_log() if line["request_id"] == headers["x-request-id"]]

    assert wait_until(lambda: logged(), 30)
    lines = logged()
    assert len(lines) == 1
    entry = lines[0]
    assert entry["path"] == NOTIFICATION
    assert entry["method"] == "POST"
    assert entry["status"] == 400
    assert entry["upstream_status"] == "400"
    assert isinstance(entry["request_time"], float)
    assert entry["tls_protocol"] in ("TLSv1.2", "TLSv1.3")
    raw = rsa_stack.access_log_path.read_text()
    assert "someone" not in raw and "example.com" not in raw
    assert "body.marker" not in raw


# ---------------------------------------------------------------- loopback-only paths


@pytest.mark.parametrize("path", ["/healthz", "/healthz/live", "/healthz/ready", "/metrics"])
def test_health_and_metrics_answer_loopback(rsa_stack, path):
    status, _, body = request(rsa_stack, "GET", path)
    assert status == 200
    assert rsa_stack.backend.seen()[-1]["params"]["DOCUMENT_URI"] == path


def test_metrics_answer_ipv6_loopback(rsa_stack):
    connection = http.client.HTTPSConnection("::1", rsa_stack.https_port, context=client_context(),
                                             timeout=CLIENT_TIMEOUT)
    try:
        connection.request("GET", "/metrics")
        assert connection.getresponse().status == 200
    finally:
        connection.close()


@pytest.mark.parametrize("path", ["/healthz", "/healthz/live", "/healthz/ready", "/metrics"])
def test_health_and_metrics_refuse_other_sources_whatever_the_headers(rsa_stack, path):
    # How "not loopback" is made honestly here: the shipped rule allows exactly
    # 127.0.0.1 and ::1, then denies all. 127.0.0.2 is another address on this
    # machine's loopback interface that the rule does not allow, so a connection
    # from it is, for these rules, exactly what a connection from the internet
    # is: an address not on the allow list. (The files are used unmodified; no
    # traffic leaves loopback; no network namespace needed.) The forged headers
    # prove the decision rests on the connection, not on anything the client says.
    forged = {"X-Forwarded-For": "127.0.0.1", "X-Real-IP": "127.0.0.1", "Forwarded": "for=127.0.0.1"}
    before = len(rsa_stack.backend.seen())
    status, _, _ = request(rsa_stack, "GET", path, headers=forged, source="127.0.0.2")
    assert status == 403
    assert len(rsa_stack.backend.seen()) == before


def test_notification_path_is_open_to_any_source(rsa_stack):
    status, _, _ = request(rsa_stack, "POST", NOTIFICATION, body=b"{}", source="127.0.0.2")
    assert status == 400


# ---------------------------------------------------------------- limits and failures


def test_rate_limit_answers_429_past_the_burst(stack_factory, rsa_cert):
    # A stack of its own: the limit zone must start empty.
    stack = stack_factory(*rsa_cert)
    rate, burst = shipped_rate_limit()
    statuses = []
    # The excess arrives at once, from connections opened (handshakes done) beforehand:
    # sent one after another, a machine slow enough to take 1/rate per request would never
    # outpace the refill, and the test would fail for the machine's speed, not nginx's limit.
    excess = 20
    senders = [http.client.HTTPSConnection("127.0.0.1", stack.https_port, context=client_context(),
                                           timeout=CLIENT_TIMEOUT) for _ in range(excess)]
    connection = http.client.HTTPSConnection("127.0.0.1", stack.https_port, context=client_context(),
                                             timeout=CLIENT_TIMEOUT)
    try:
        for sender in senders:
            sender.connect()
        started = time.monotonic()
        # The burst, in full, over one kept-alive connection (burst + 1 requests, bounded).
        for _ in range(burst + 1):
            connection.request("POST", NOTIFICATION, body=b"{}")
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
        # Then the excess, all released together.
        gate = threading.Barrier(excess)
        answers = [None] * excess

        def send(index):
            gate.wait(timeout=CLIENT_TIMEOUT)
            senders[index].request("POST", NOTIFICATION, body=b"{}")
            response = senders[index].getresponse()
            response.read()
            answers[index] = response.status

        threads = [threading.Thread(target=send, args=(index,)) for index in range(excess)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=2 * CLIENT_TIMEOUT)
        assert not any(thread.is_alive() for thread in threads)
        statuses += answers
    finally:
        connection.close()
        for sender in senders:
            sender.close()
    elapsed = time.monotonic() - started
    assert set(statuses) <= {400, 429}, statuses
    # The burst is served at once, in full...
    assert statuses[: burst + 1] == [400] * (burst + 1)
    # ...and then the limit bites with 429 (not nginx's default 503).
    assert statuses.count(429) >= 1
    # No more got through than the burst plus what the rate refilled meanwhile.
    assert statuses.count(400) <= burst + 1 + rate * elapsed + 1


def test_responder_down_gives_a_fast_502(stack_factory, rsa_cert):
    stack = stack_factory(*rsa_cert, with_backend=False)
    status, headers, _ = request(stack, "POST", NOTIFICATION, body=b"{}")
    # 502: the connect was refused at once. Waiting out fastcgi_connect_timeout (2 s)
    # would answer 504. "Fast" is measured by nginx itself ($request_time in its access
    # log: no client handshake or scheduling of this test in it), against half that timeout.
    assert status == 502
    assert wait_until(lambda: any(line["request_id"] == headers["x-request-id"] for line in stack.access_log()), 30)
    entry = next(line for line in stack.access_log() if line["request_id"] == headers["x-request-id"])
    assert entry["status"] == 502
    assert entry["request_time"] < 1.0, entry


# ---------------------------------------------------------------- two certificates, resumption


@pytest.fixture(scope="module")
def dual_stack(stack_factory, rsa_cert, ecdsa_cert):
    """The shipped site as shipped: the RSA pair and the ECDSA pair, both served."""
    return stack_factory(*rsa_cert, ec_pair=ecdsa_cert)


def s_client(stack, *options, stdin=b""):
    return subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{stack.https_port}", "-servername",
                           "localhost", *options], input=stdin, capture_output=True, timeout=30)


def offered_key(stack, *options):
    """The public-key kind of the certificate the server sends to a client with `options`."""
    handshake = s_client(stack, *options)
    assert handshake.returncode == 0, handshake.stderr.decode()
    text = subprocess.run(["openssl", "x509", "-noout", "-text"], input=handshake.stdout, capture_output=True,
                          timeout=30).stdout.decode()
    return "EC" if "id-ecPublicKey" in text else "RSA" if "rsaEncryption" in text else text


@pytest.mark.parametrize("options, expected", [
    (("-tls1_3", "-sigalgs", "ecdsa_secp256r1_sha256"), "EC"),
    (("-tls1_3", "-sigalgs", "rsa_pss_rsae_sha256:rsa_pkcs1_sha256"), "RSA"),
    (("-tls1_2", "-sigalgs", "ECDSA+SHA256"), "EC"),
    (("-tls1_2", "-sigalgs", "RSA+SHA256:RSA-PSS+SHA256"), "RSA"),
    # A client that can verify both (every current one, Apple's too) gets the cheap one.
    (("-tls1_3",), "EC"),
    (("-tls1_2",), "EC"),
])
def test_each_client_gets_the_certificate_it_can_verify(dual_stack, options, expected):
    assert offered_key(dual_stack, *options) == expected


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
def test_sessions_resume_from_the_shared_cache_with_tickets_off(dual_stack, workdir, version):
    session = workdir / f"session{version}.pem"
    # The request keeps the connection up until the server's session (TLS 1.3: its
    # stateful ticket) has arrived.
    request = b"GET /nothing HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    first = s_client(dual_stack, version, "-sess_out", str(session), "-ign_eof", stdin=request)
    assert first.returncode == 0 and session.exists(), first.stderr.decode()
    second = s_client(dual_stack, version, "-sess_in", str(session), "-ign_eof", stdin=request)
    assert second.returncode == 0, second.stderr.decode()
    assert b"\nReused, TLSv1." in second.stdout, second.stdout.decode(errors="replace")[:2000]
