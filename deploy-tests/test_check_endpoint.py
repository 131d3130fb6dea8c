"""scripts/check-endpoint against real nginx stacks: the shipped one passes,
each deliberately broken variant fails on the check that names its fault."""

import subprocess

import pytest

from deploy_harness import CHECK_ENDPOINT


def check(url, *extra):
    """Run the script; returns (exit code, {check name: (status, detail)}, output)."""
    finished = subprocess.run([str(CHECK_ENDPOINT), url, "--timeout", "3", *extra],
                              capture_output=True, text=True, timeout=120)
    rows = {}
    for line in finished.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[1] in ("PASS", "WARN", "FAIL"):
            rows[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return finished.returncode, rows, finished.stdout + finished.stderr


def failures(rows):
    return {name for name, (status, _) in rows.items() if status == "FAIL"}


@pytest.mark.parametrize("stack_name", ["rsa_stack", "ecdsa_stack"])
def test_shipped_stack_passes(request, pki, stack_name):
    stack = request.getfixturevalue(stack_name)
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    assert code == 0, output
    assert failures(rows) == set(), output
    for name in ("url", "connect", "tls1.0-refused", "tls1.1-refused", "tls1.2-offered", "tls1.2-suites",
                 "cert-key", "cert-signature", "cert-expiry", "cert-chain", "post-unsigned", "hsts"):
        assert rows[name][0] == "PASS", output
    # The test port is not 443: that is the one warning expected.
    assert rows["port"][0] == "WARN"
    assert rows["post-unsigned"][1].startswith("400 in ")
    expected = {"rsa_stack": "ECDHE-RSA-AES256-GCM-SHA384, ECDHE-RSA-AES128-GCM-SHA256",
                "ecdsa_stack": "ECDHE-ECDSA-AES256-GCM-SHA384, ECDHE-ECDSA-AES128-GCM-SHA256"}[stack_name]
    assert rows["tls1.2-suites"][1].startswith(expected + ";"), output


def test_tls10_enabled_fails(stack_factory, rsa_cert, pki):
    def enable_tls10(site):
        # Debian's own http-context default (TLSv1 and TLSv1.1 on). They need a
        # CBC suite and, under OpenSSL 3, security level 0.
        return site.replace("ssl_protocols TLSv1.2 TLSv1.3;", "ssl_protocols TLSv1 TLSv1.1 TLSv1.2 TLSv1.3;").replace(
            "ECDHE-RSA-AES256-GCM-SHA384;", "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-SHA:@SECLEVEL=0;")

    stack = stack_factory(*rsa_cert, site_edit=enable_tls10)
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    assert code == 1
    assert failures(rows) == {"tls1.0-refused", "tls1.1-refused"}, output
    assert rows["tls1.0-refused"][1].startswith("server accepted TLSv1 ECDHE-RSA-AES128-SHA;")
    assert rows["tls1.1-refused"][1].startswith("server accepted TLSv1.1 ECDHE-RSA-AES128-SHA;")
    # ECDHE-RSA-AES128-SHA is in ATS's list: only the protocol is at fault.
    assert rows["tls1.2-suites"][0] == "PASS"


def test_non_forward_secret_suite_fails(stack_factory, rsa_cert, pki):
    def add_rsa_kx(site):
        return site.replace("ECDHE-RSA-AES256-GCM-SHA384;", "ECDHE-RSA-AES256-GCM-SHA384:AES128-GCM-SHA256;")

    stack = stack_factory(*rsa_cert, site_edit=add_rsa_kx)
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    assert code == 1
    assert failures(rows) == {"tls1.2-suites"}, output
    assert "AES128-GCM-SHA256 (not forward secret)" in rows["tls1.2-suites"][1]


def test_expired_certificate_fails(stack_factory, pki):
    stack = stack_factory(*pki.expired_leaf("expired-leaf"))
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    assert code == 1
    assert rows["cert-expiry"] == ("FAIL", "expired on Feb  1 00:00:00 2020 GMT"), output
    assert rows["cert-chain"][0] == "FAIL" and "expired" in rows["cert-chain"][1]
    # cert-offered checks each certificate offered: the one, expired.
    assert rows["cert-offered"] == ("FAIL", "RSA expired on Feb  1 00:00:00 2020 GMT"), output
    assert failures(rows) == {"cert-expiry", "cert-chain", "cert-offered"}, output


def test_weak_rsa_key_fails(stack_factory, pki):
    # Debian's OpenSSL refuses to load a 1024-bit key at its default security
    # level, so the shipped file cannot serve one; lower it to make the fault.
    def allow_weak_key(site):
        return site.replace("ECDHE-RSA-AES256-GCM-SHA384;", "ECDHE-RSA-AES256-GCM-SHA384:@SECLEVEL=0;")

    stack = stack_factory(*pki.leaf("weak-leaf", key="rsa1024"), site_edit=allow_weak_key)
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    assert code == 1
    assert rows["cert-key"] == ("FAIL", "RSA 1024 bits: ATS wants RSA >= 2048"), output


def test_untrusted_chain_fails(rsa_stack):
    # No --ca-file: the test CA is not in the system store.
    code, rows, output = check(rsa_stack.url)
    assert code == 1
    assert failures(rows) == {"cert-chain"}, output
    assert "unable to get local issuer certificate" in rows["cert-chain"][1]


def test_responder_down_fails_the_post_check(stack_factory, rsa_cert, pki):
    stack = stack_factory(*rsa_cert, with_backend=False)
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    assert code == 1
    assert failures(rows) == {"post-unsigned"}, output
    assert rows["post-unsigned"][1].startswith("502 in ")


def test_wrong_path_fails_the_post_check(rsa_stack, pki):
    url = rsa_stack.url.replace("/apple/notifications", "/apple/notification")
    code, rows, output = check(url, "--ca-file", str(pki.ca_cert))
    assert code == 1
    assert failures(rows) == {"post-unsigned"}, output
    assert "404" in rows["post-unsigned"][1]


@pytest.mark.parametrize("url, reason", [
    ("http://localhost/apple/notifications", "scheme must be https"),
    ("https:///apple/notifications", "no host"),
    ("https://localhost", "no path"),
    ("https://user:secret@localhost/apple/notifications", "credentials in the URL"),
])
def test_bad_urls_fail_without_connecting(url, reason):
    code, rows, output = check(url)
    assert code == 1
    assert rows["url"][0] == "FAIL" and reason in rows["url"][1], output
    # Nothing else ran: no connection was attempted.
    assert set(rows) == {"url"}, output


def test_nothing_listening_fails_at_connect(workdir):
    from deploy_harness import free_port

    code, rows, output = check(f"https://127.0.0.1:{free_port()}/apple/notifications")
    assert code == 1
    assert rows["connect"][0] == "FAIL", output


def test_accepting_an_unsigned_notification_fails(stack_factory, rsa_cert, pki):
    # A responder that answers 2xx to an unsigned token verifies nothing.
    stack = stack_factory(*rsa_cert, backend_options={"notification_status": "200 OK"})
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    assert code == 1
    assert failures(rows) == {"post-unsigned"}, output
    assert rows["post-unsigned"][1].startswith("200 in "), output
    assert rows["post-unsigned"][1].endswith(": an unsigned notification was ACCEPTED"), output


def test_slow_answer_fails(stack_factory, rsa_cert, pki):
    # The stub waits 1.5 s before answering (nginx waits up to 10 s), so the
    # refusal itself is right but later than the 1 s check-endpoint allows.
    stack = stack_factory(*rsa_cert, backend_options={"delay": 1.5})
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    assert code == 1
    assert failures(rows) == {"post-unsigned"}, output
    assert rows["post-unsigned"][1].startswith("400 in "), output
    assert rows["post-unsigned"][1].endswith(": slower than 1 s"), output


def test_certificate_expiring_within_30_days_warns(stack_factory, pki):
    stack = stack_factory(*pki.leaf("short-leaf", days=10))
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    # A warning, not a failure: the endpoint works today.
    assert code == 0, output
    assert failures(rows) == set(), output
    status, detail = rows["cert-expiry"]
    assert status == "WARN", output
    assert detail.endswith(("in 9 days: renew now", "in 10 days: renew now")), output


def test_sha1_signed_certificate_fails(stack_factory, pki):
    # OpenSSL refuses to serve a SHA-1-signed certificate at its default
    # security level; lower it in the site file to make the fault.
    def allow_sha1(site):
        return site.replace("ECDHE-RSA-AES256-GCM-SHA384;", "ECDHE-RSA-AES256-GCM-SHA384:@SECLEVEL=0;")

    stack = stack_factory(*pki.leaf("sha1-leaf", digest="sha1"), site_edit=allow_sha1)
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert))
    assert code == 1
    assert rows["cert-signature"] == ("FAIL", "sha1WithRSAEncryption: ATS wants SHA-256 or stronger"), output
    assert rows["cert-key"][0] == "PASS", output
    assert rows["cert-expiry"][0] == "PASS", output


def test_each_offered_certificate_is_reported(stack_factory, rsa_cert, ecdsa_cert, pki):
    dual = stack_factory(*rsa_cert, ec_pair=ecdsa_cert)
    code, rows, output = check(dual.url, "--ca-file", str(pki.ca_cert))
    assert code == 0, output
    status, detail = rows["cert-offered"]
    assert status == "PASS", output
    assert detail.startswith("ECDSA 256 bits, valid until ") and "; RSA 2048 bits, valid until " in detail, detail
    assert detail.endswith("(each client gets the one it can verify)")
    rsa_only = stack_factory(*rsa_cert)
    code, rows, output = check(rsa_only.url, "--ca-file", str(pki.ca_cert))
    assert code == 0, output
    assert rows["cert-offered"][0] == "WARN" and "RSA only" in rows["cert-offered"][1], output


def with_google_location(site):
    """The shipped site with its Google location: the Apple location's block (same TLS, same
    limits, the same responder) at /google/risc, unless the site already has one."""
    if "location = /google/risc" in site:
        return site + "\n# The Google location above is the shipped one.\n"
    start = site.index("    location = /apple/notifications {")
    end = site.index("\n    }\n", start) + len("\n    }\n")
    block = site[start:end].replace("location = /apple/notifications", "location = /google/risc")
    return site[:end] + "\n" + block + site[end:]


def test_google_location_routes_to_the_responder(stack_factory, rsa_cert, pki):
    stack = stack_factory(*rsa_cert, site_edit=with_google_location)
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert), "--google")
    assert code == 0, output
    assert failures(rows) == set(), output
    status, detail = rows["google-no-token"]
    assert status == "PASS" and detail.startswith("400 invalid_request in "), output
    assert detail.endswith(": the location routes to the responder"), output
    assert rows["google-unsigned"][0] == "PASS" and rows["google-unsigned"][1].startswith("400 invalid_request in ")
    # The responder saw both POSTs at the Google location, the token as the body.
    google = [r for r in stack.backend.seen() if r["params"].get("DOCUMENT_URI") == "/google/risc"]
    assert [(r["params"]["REQUEST_METHOD"], r["params"]["CONTENT_TYPE"], r["body_length"]) for r in google] == [
        ("POST", "application/secevent+jwt", 0), ("POST", "application/secevent+jwt", 72)], google


def test_google_location_not_served_fails(stack_factory, rsa_cert, pki):
    stack = stack_factory(*rsa_cert, site_edit=with_google_location)
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert), "--google", "/google/riscs")
    assert code == 1
    assert failures(rows) == {"google-no-token", "google-unsigned"}, output
    assert rows["google-no-token"][1].startswith("404 in ") and "is not served" in rows["google-no-token"][1], output


def test_google_location_accepting_everything_fails(stack_factory, rsa_cert, pki):
    # A responder that answers 202 to anything at the Google location verifies nothing.
    stack = stack_factory(*rsa_cert, site_edit=with_google_location, backend_options={"google_status": "202 Accepted"})
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert), "--google")
    assert code == 1
    assert failures(rows) == {"google-no-token", "google-unsigned"}, output
    assert rows["google-no-token"][1].endswith(": a POST without a token was ACCEPTED"), output
    assert rows["google-unsigned"][1].endswith(": an unsigned SET was ACCEPTED"), output


def test_google_location_on_another_host_is_refused_without_connecting(rsa_stack, pki):
    code, rows, output = check(rsa_stack.url, "--ca-file", str(pki.ca_cert), "--google",
                               "https://elsewhere.example/google/risc")
    assert code == 1
    assert rows["google-no-token"] == (
        "FAIL", "--google must be a path, or an https URL on the host and port of URL (this script connects to "
        "nothing else)"), output
    assert "google-unsigned" not in rows


def test_google_location_answered_by_nginx_itself_fails(stack_factory, rsa_cert, pki):
    # A location that never reaches the responder (nginx's own 400 page): not the receiver.
    def google_location_without_responder(site):
        site = with_google_location(site)
        start = site.index("    location = /google/risc {")
        end = site.index("\n    }\n", start) + len("\n    }\n")
        return site[:start] + "    location = /google/risc {\n        return 400;\n    }\n" + site[end:]

    stack = stack_factory(*rsa_cert, site_edit=google_location_without_responder)
    code, rows, output = check(stack.url, "--ca-file", str(pki.ca_cert), "--google")
    assert code == 1
    assert failures(rows) == {"google-no-token", "google-unsigned"}, output
    assert rows["google-no-token"][1].endswith("expected 400 with RFC 8935's {\"err\": ...} body from the responder"), \
        output
    assert rows["google-unsigned"][1].endswith(": expected 400 with one of RFC 8935's error codes"), output
