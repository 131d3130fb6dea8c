"""The Debian package on a booted Debian 12 with systemd as PID 1 (systemd-nspawn; see
booted_debian.py). No Swift inside: the package, apt, and Debian's nginx and
redis-server. Apple itself cannot be reached from a test: the test kit's key signs the
notifications (on the host) and an nginx server inside the container serves its JWKS over
HTTPS under the test CA, standing in for https://appleid.apple.com/auth/keys.

The tests run in the order written, on one booted host: install (nothing starts),
configure (it starts), then each check, the upgrade and the rollback, a reboot, and
purge. Run by scripts/test with SIWA_PACKAGE_DEB (the package scripts/package made), and
with SIWA_PACKAGE_SUITE=trixie for Debian 13's package (scripts/package --debian trixie)."""

import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import pytest

from booted_debian import BootedDebian
from deploy_harness import REPO, Pki

CLIENT_ID = "com.example.app"
KEY_ID = "package-test-key"
CLIENT = pathlib.Path(__file__).with_name("notification_client.py")
ENV = "/etc/siwa-endpoint/env"
REDIS_INCLUDE = "include /etc/redis/siwa-endpoint.conf"
# Notifications a second, below the site's limit of 50 a second from one address.
RATE = 40
SUITE = os.environ.get("SIWA_PACKAGE_SUITE", "bookworm")


def package_path():
    configured = os.environ.get("SIWA_PACKAGE_DEB")
    if configured:
        return pathlib.Path(configured)
    built = sorted((REPO / "dist").glob("siwa-endpoint_*-1_*.deb"))
    assert built, "no package: run scripts/package (or set SIWA_PACKAGE_DEB)"
    return built[-1]


def restamped(deb, revision, directory):
    """The same package under a higher Debian revision (1.0.0-1 -> 1.0.0-REVISION): what
    an upgrade needs is a newer version; the binary inside is the same build."""
    unpacked = directory / f"unpacked-{revision}"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(unpacked)], check=True, timeout=300)
    control = unpacked / "DEBIAN" / "control"
    text = control.read_text()
    version, suffix = re.search(r"^Version: (\S+)-\d+(\+deb\d+)?$", text, re.M).groups()
    new_version = f"{version}-{revision}{suffix or ''}"
    control.write_text(re.sub(r"^Version: .*$", f"Version: {new_version}", text, flags=re.M))
    target = directory / f"siwa-endpoint_{new_version}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "-b", str(unpacked), str(target)],
                   check=True, capture_output=True, timeout=300)
    return target, new_version


class Deployment:
    """The booted host, the host-side keys and certificates, and what the tests post."""

    def __init__(self, machine, workdir, binary):
        self.machine = machine
        self.workdir = workdir
        self.binary = binary
        self.pki = Pki(workdir / "pki")
        self.cert, self.key = self.pki.leaf("localhost")
        keys = workdir / "keys"
        subprocess.run([str(binary), "keygen", "--out", str(keys), "--kid", KEY_ID], check=True,
                       capture_output=True, timeout=60)
        self.signing_key = keys / "test-signing-key.pem"
        self.jwks = (keys / "test-jwks.json").read_text()
        self.signed = 0

    def bodies(self, count):
        """`count` distinct consent-revoked notifications: (subs, bodies)."""
        prefix = f"user{self.signed}"
        self.signed += 1
        result = subprocess.run(
            [str(self.binary), "sign", "--key", str(self.signing_key), "--kid", KEY_ID, "--type", "consent-revoked",
             "--sub", prefix, "--client-id", CLIENT_ID, "--count", str(count)], check=True, capture_output=True,
            text=True, timeout=120)
        bodies = [line for line in result.stdout.splitlines() if line]
        assert len(bodies) == count
        return [f"{prefix}.{index}" for index in range(1, count + 1)], bodies

    def post(self, bodies, threads=4):
        """Posts through nginx over TLS inside the container: [(status, outcome)]."""
        result = self.machine.host_in_network([sys.executable, str(CLIENT), str(self.pki.ca_cert), str(threads),
                                               str(RATE)],
                                              input="\n".join(bodies) + "\n")
        assert result.returncode == 0, result.stderr
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        return [(line["status"], line["outcome"]) for line in lines[:-1]]

    def start_load(self, bodies, stop_file, threads=4):
        """Posts `bodies` in the background until they run out or `stop_file` exists."""
        bodies_file = stop_file.with_suffix(".bodies")
        bodies_file.write_text("\n".join(bodies) + "\n")
        with open(bodies_file) as source:
            return subprocess.Popen(
                ["nsenter", "-t", str(self.machine.pid), "-n", sys.executable, str(CLIENT),
                 str(self.pki.ca_cert), str(threads), str(RATE), str(stop_file)], stdin=source, stdout=subprocess.PIPE,
                text=True)

    def redis(self, *args):
        return self.machine.run(["redis-cli", "--no-raw", *args]).stdout.strip()

    def stream_count_by_sub(self):
        text = self.machine.run(["redis-cli", "--json", "XRANGE", "siwa:events", "-", "+"]).stdout
        counts = {}
        for _, fields in json.loads(text) if text.strip() else []:
            sub = dict(zip(fields[0::2], fields[1::2])).get("sub")
            counts[sub] = counts.get(sub, 0) + 1
        return counts

    def revoked(self, sub):
        value = self.machine.run(["redis-cli", "HGET", f"siwa:user:{{{CLIENT_ID}:{sub}}}", "consent_revoked_at"])
        return value.stdout.strip() != ""

    def main_pid(self, slot):
        return int(self.machine.property(f"siwa-endpoint@{slot}", "MainPID"))

    def active_slot(self):
        upstream = self.machine.run(["cat", "/etc/nginx/siwa-endpoint-upstream.conf"]).stdout
        return re.search(r"unix:/run/siwa-endpoint/(\w+)\.sock;", upstream).group(1)

    def journal(self, unit, *options):
        text = self.machine.run(["journalctl", "-u", unit, "-o", "json", "--no-pager", *options]).stdout
        return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def deployment():
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="siwa-package-"))
    binary = pathlib.Path(os.environ.get("SIWA_RELEASE_BINARY", REPO / ".build" / "release" / "siwa-endpoint"))
    machine = BootedDebian(SUITE)
    try:
        machine.boot()
        yield Deployment(machine, workdir, binary)
    finally:
        machine.close()
        subprocess.run(["rm", "-rf", str(workdir)], check=False)


@pytest.fixture(scope="module")
def installed(deployment):
    """The package installed with apt, then configured the way the README says."""
    machine = deployment.machine
    machine.put_file("/root/siwa-endpoint.deb", package_path())
    result = machine.run(["apt-get", "install", "-y", "--no-install-recommends", "/root/siwa-endpoint.deb"],
                         timeout=300)
    return result


def test_install_starts_nothing_until_configured(deployment, installed):
    machine = deployment.machine
    assert "nothing started yet" in installed.stdout
    assert "set SIWA_CLIENT_IDS" in installed.stdout
    assert REDIS_INCLUDE in installed.stdout
    assert machine.run(["systemctl", "is-active", "siwa-endpoint@blue"], check=False).stdout.strip() == "inactive"
    assert machine.run(["test", "-e", "/etc/nginx/sites-enabled/siwa-endpoint.conf"], check=False).returncode == 1
    assert machine.run(["stat", "-c", "%U:%G %a", "/etc/siwa-endpoint/env"]).stdout.strip() == \
        "root:siwa-endpoint 640"
    # The users (systemd-sysusers) and the directories (systemd-tmpfiles), as declared in
    # debian/siwa-endpoint.sysusers and .tmpfiles.
    for user in ("siwa-endpoint", "siwa-endpoint-reconcile", "siwa-endpoint-deliver"):
        entry = machine.run(["getent", "passwd", user]).stdout.strip().split(":")
        group = machine.run(["getent", "group", user]).stdout.strip().split(":")
        assert (entry[3], entry[5], entry[6]) == (group[2], "/nonexistent", "/usr/sbin/nologin"), entry
        assert int(entry[2]) < 1000, entry
    modes = {path: machine.run(["stat", "-c", "%U:%G %a", path]).stdout.strip()
             for path in ("/var/lib/siwa-endpoint", "/var/lib/siwa-endpoint-reconcile", "/etc/siwa-endpoint/reconcile",
                          "/run/siwa-endpoint", "/etc/siwa-endpoint", "/etc/siwa-endpoint/webhook-keys")}
    assert modes == {"/var/lib/siwa-endpoint": "siwa-endpoint:siwa-endpoint 750",
                     "/var/lib/siwa-endpoint-reconcile": "siwa-endpoint-reconcile:siwa-endpoint-reconcile 700",
                     "/etc/siwa-endpoint/reconcile": "siwa-endpoint-reconcile:siwa-endpoint-reconcile 700",
                     "/run/siwa-endpoint": "siwa-endpoint:siwa-endpoint 755",
                     "/etc/siwa-endpoint": "root:siwa-endpoint 750",
                     "/etc/siwa-endpoint/webhook-keys": "siwa-endpoint-deliver:siwa-endpoint-deliver 700"}
    # The reconcile timer is installed, not enabled: nothing of the package runs yet.
    assert machine.run(["systemctl", "is-enabled", "siwa-endpoint-reconcile.timer"],
                       check=False).stdout.strip() == "disabled"
    assert machine.run(["systemctl", "is-active", "siwa-endpoint-reconcile.timer"],
                       check=False).stdout.strip() == "inactive"
    # The deliverer is installed, not enabled: it needs a destinations file and keys first.
    assert machine.run(["systemctl", "is-enabled", "siwa-endpoint-deliver.service"],
                       check=False).stdout.strip() == "disabled"
    # Runtime packages only: nothing of the build or test toolchain came with it.
    listed = machine.run(["dpkg-query", "-W", "-f", "${Package}\n"]).stdout.split()
    for tool in ("swift", "gcc", "libssl-dev", "prometheus", "wrk", "nodejs", "ruby", "python3"):
        assert tool not in listed


def configure(deployment):
    """The operator's steps: client IDs, host name, certificate; here also the JWKS URL of
    the stand-in for Apple and the Redis durability include."""
    machine = deployment.machine
    machine.put("/etc/ssl/siwa-endpoint/fullchain.pem", deployment.cert.read_text())
    machine.put("/etc/ssl/siwa-endpoint/privkey.pem", deployment.key.read_text(), mode="0600")
    ecdsa_cert, ecdsa_key = deployment.pki.leaf("systemd-ecdsa-leaf", key="ec")
    machine.put("/etc/ssl/siwa-endpoint/ecdsa-fullchain.pem", ecdsa_cert.read_text())
    machine.put("/etc/ssl/siwa-endpoint/ecdsa-privkey.pem", ecdsa_key.read_text(), mode="0600")
    machine.put("/etc/siwa-endpoint/test-ca.pem", deployment.pki.ca_cert.read_text())
    machine.put("/srv/apple-standin/jwks.json", deployment.jwks)
    machine.put("/etc/nginx/conf.d/apple-jwks-standin.conf", """
# Test only: stands in for https://appleid.apple.com/auth/keys.
server {
    listen 127.0.0.1:8444 ssl;
    server_name localhost;
    ssl_certificate /etc/ssl/siwa-endpoint/fullchain.pem;
    ssl_certificate_key /etc/ssl/siwa-endpoint/privkey.pem;
    location = /jwks.json { root /srv/apple-standin; }
}
""")
    machine.sh("sed -i 's/siwa\\.example\\.com/localhost/g' /etc/nginx/sites-available/siwa-endpoint.conf")
    machine.sh(f"""cat >>{ENV} <<'EOF'
SIWA_CLIENT_IDS={CLIENT_ID}
SIWA_JWKS_URL=https://localhost:8444/jwks.json
SIWA_JWKS_CA_FILE=/etc/siwa-endpoint/test-ca.pem
EOF""")
    machine.sh(f"echo '{REDIS_INCLUDE}' >>/etc/redis/redis.conf && systemctl restart redis-server nginx")


def test_configured_it_starts_and_a_notification_through_nginx_and_tls_is_applied(deployment, installed):
    machine = deployment.machine
    configure(deployment)
    # The README's check, as the service user sees the files (the slot's own socket and
    # spool, as the unit sets them).
    check = ["serve", "--env-file", ENV, "--check"]
    as_service = ["runuser", "-u", "siwa-endpoint", "--", "env", "SIWA_FCGI_SOCKET=/run/siwa-endpoint/blue.sock",
                  "SIWA_SPOOL_DIR=/var/lib/siwa-endpoint/spool-blue", "siwa-endpoint", *check]
    valid = json.loads(machine.run(as_service).stdout)
    assert (valid["event"], valid["checked_as"]) == ("configuration_valid", "siwa-endpoint")
    # An env file root can read and the service user cannot: root's check says whose view
    # it took, and the service user's check refuses it.
    machine.run(["chmod", "0600", ENV])
    try:
        as_root = json.loads(machine.run(["siwa-endpoint", *check]).stdout)
        assert (as_root["event"], as_root["checked_as"]) == ("configuration_valid", "root")
        refused = machine.run(as_service, check=False)
        assert refused.returncode == 2 and '"event":"configuration_invalid"' in refused.stderr
    finally:
        machine.run(["chmod", "0640", ENV])
    result = machine.run(["dpkg-reconfigure", "siwa-endpoint"], timeout=120)
    assert "siwa-endpoint@blue is enabled" in result.stdout
    assert machine.run(["systemctl", "is-enabled", "siwa-endpoint@blue"]).stdout.strip() == "enabled"
    machine.wait_for(lambda: machine.run(["/usr/bin/siwa-endpoint", "status", "--socket",
                                          "/run/siwa-endpoint/blue.sock"], check=False).returncode == 0,
                     60, "slot blue healthy")
    subs, bodies = deployment.bodies(1)
    assert deployment.post(bodies) == [(200, "applied")]
    assert deployment.revoked(subs[0])
    assert machine.run(["redis-cli", "CONFIG", "GET", "appendonly"]).stdout.split() == ["appendonly", "yes"]


def test_the_unit_runs_with_its_hardening(deployment, installed):
    machine = deployment.machine
    result = machine.run(["systemd-analyze", "security", "--no-pager", "siwa-endpoint@blue.service"], check=False)
    exposure = float(re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout).group(1))
    print(f"systemd-analyze security: overall exposure {exposure}")
    assert exposure <= 2.0, result.stdout
    pid = deployment.main_pid("blue")
    status = machine.run(["cat", f"/proc/{pid}/status"]).stdout
    assert re.search(r"^CapEff:\s+0+$", status, re.M)
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M)
    assert re.search(r"^Seccomp:\s+2$", status, re.M)
    assert machine.run(["stat", "-c", "%U", f"/proc/{pid}"]).stdout.strip() == "siwa-endpoint"


def test_serve_cannot_read_what_reconcile_holds(deployment, installed):
    machine = deployment.machine
    machine.put("/var/lib/siwa-endpoint-reconcile/users.jsonl", "", mode="0600",
                owner="siwa-endpoint-reconcile:siwa-endpoint-reconcile")
    key = subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    machine.put("/etc/siwa-endpoint/reconcile/apple-key.p8", key, mode="0600",
                owner="siwa-endpoint-reconcile:siwa-endpoint-reconcile")
    pid = deployment.main_pid("blue")
    serve_uid = machine.run(["id", "-u", "siwa-endpoint"]).stdout.strip()
    serve_gid = machine.run(["id", "-g", "siwa-endpoint"]).stdout.strip()
    for path in ("/var/lib/siwa-endpoint-reconcile/users.jsonl", "/etc/siwa-endpoint/reconcile/apple-key.p8"):
        # Two walls. The serve unit's file system has no such path (InaccessiblePaths=):
        # not even root, in serve's mount namespace, reads it.
        in_serve_namespace = machine.run(["nsenter", "-t", str(pid), "-m", "cat", path], check=False)
        assert in_serve_namespace.returncode != 0 and in_serve_namespace.stdout == "", path
        # And serve's user cannot read it anywhere: reconcile's own user owns it, 0600.
        as_serve_user = machine.run(["setpriv", f"--reuid={serve_uid}", f"--regid={serve_gid}", "--init-groups",
                                     "cat", path], check=False)
        assert "Permission denied" in as_serve_user.stderr and as_serve_user.stdout == "", path
    # reconcile, as its own unit, reads both (an unreadable key would stop it with exit 2).
    machine.sh(f"""cat >>{ENV} <<'EOF'
SIWA_APPLE_TEAM_ID=TEAM123456
SIWA_APPLE_KEY_ID=KEY1234567
SIWA_APPLE_PRIVATE_KEY_FILE=/etc/siwa-endpoint/reconcile/apple-key.p8
EOF""")
    run = machine.run(["systemctl", "start", "siwa-endpoint-reconcile.service"], check=False, timeout=120)
    assert run.returncode == 0, machine.run(["journalctl", "-u", "siwa-endpoint-reconcile", "--no-pager"]).stdout
    assert machine.property("siwa-endpoint-reconcile", "ExecMainStatus") == "0"
    assert machine.property("siwa-endpoint-reconcile", "User") == "siwa-endpoint-reconcile"


def test_the_deliverer_unit_posts_a_signed_webhook_once_configured(deployment, installed):
    """The deliverer as its unit runs it under systemd: the operator's steps of the unit's
    header (a key made as its user, the destinations file, enable --now), then a notification
    through nginx reaches an HTTPS receiver (nginx, under the test CA) signed, once."""
    machine = deployment.machine
    # As the unit's header says: the deliverer's user, with the group its unit adds (the key
    # directory is below /etc/siwa-endpoint, 0750 root:siwa-endpoint).
    as_deliverer = ["runuser", "-u", "siwa-endpoint-deliver", "-g", "siwa-endpoint-deliver", "-G", "siwa-endpoint",
                    "--"]
    keygen = machine.run([*as_deliverer, "siwa-endpoint", "deliver", "keygen", "--scheme", "ed25519", "--out",
                          "/etc/siwa-endpoint/webhook-keys/package.key"])
    assert "whpk_" in keygen.stdout + keygen.stderr
    assert machine.run(["stat", "-c", "%U %a", "/etc/siwa-endpoint/webhook-keys/package.key"]).stdout.strip() == \
        "siwa-endpoint-deliver 600"
    # The receiver: 204 to every POST, each request's method, status and Standard Webhooks
    # headers in its own log.
    machine.put("/etc/nginx/conf.d/webhook-receiver.conf", """
# Test only: a webhook destination.
log_format webhook_receiver '$request_method $uri $status id=$http_webhook_id sig=$http_webhook_signature';
server {
    listen 127.0.0.1:8445 ssl;
    server_name localhost;
    ssl_certificate /etc/ssl/siwa-endpoint/fullchain.pem;
    ssl_certificate_key /etc/ssl/siwa-endpoint/privkey.pem;
    access_log /var/log/nginx/webhook-receiver.log webhook_receiver;
    location = /hook { return 204; }
}
""")
    machine.run(["systemctl", "reload", "nginx"])
    destinations = {"destinations": [{
        "name": "package", "url": "https://localhost:8445/hook",
        "signing_key_files": ["/etc/siwa-endpoint/webhook-keys/package.key"],
        "types": ["consent-revoked"], "client_ids": [CLIENT_ID], "include_email": False,
        "ca_file": "/etc/siwa-endpoint/test-ca.pem", "allow_private_address": True,
        "format": "standard-webhooks"}]}
    machine.put("/etc/siwa-endpoint/webhooks.json", json.dumps(destinations), mode="0640",
                owner="root:siwa-endpoint")
    check = machine.run([*as_deliverer, "siwa-endpoint", "deliver", "--env-file", ENV, "--check"], check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    machine.run(["systemctl", "enable", "--now", "siwa-endpoint-deliver"], timeout=120)
    assert machine.property("siwa-endpoint-deliver", "User") == "siwa-endpoint-deliver"
    # Its consumer group starts at the stream's end: once it exists, a notification is the next event.
    machine.wait_for(lambda: "deliver:package" in deployment.redis("XINFO", "GROUPS", "siwa:events"), 60,
                     "the deliverer's consumer group")
    subs, bodies = deployment.bodies(1)
    assert deployment.post(bodies) == [(200, "applied")]

    def posts():
        text = machine.run(["cat", "/var/log/nginx/webhook-receiver.log"], check=False).stdout
        return [line for line in text.splitlines() if line.startswith("POST")]

    machine.wait_for(lambda: posts(), 60, "a webhook at the receiver")
    machine.wait_for(lambda: deployment.redis("XPENDING", "siwa:events", "deliver:package").startswith("1) (integer) 0"),
                     30, "nothing pending for the destination")
    [line] = posts()
    assert re.fullmatch(r"POST /hook 204 id=\S+ sig=v1a,\S+", line), line
    pid = machine.property("siwa-endpoint-deliver", "MainPID")
    status = machine.run(["cat", f"/proc/{pid}/status"]).stdout
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M) and re.search(r"^CapEff:\s+0+$", status, re.M)
    assert machine.run(["systemctl", "is-active", "siwa-endpoint-deliver"]).stdout.strip() == "active"


def test_reload_keeps_the_process_and_reloads_the_key_cache(deployment, installed):
    machine = deployment.machine
    before = deployment.main_pid("blue")
    reloads = len([e for e in deployment.journal("siwa-endpoint@blue") if "jwks_cache_reloaded" in e["MESSAGE"]])
    machine.run(["systemctl", "reload", "siwa-endpoint@blue"])
    machine.wait_for(lambda: len([e for e in deployment.journal("siwa-endpoint@blue")
                                  if "jwks_cache_reloaded" in e["MESSAGE"]]) == reloads + 1, 30,
                     "a jwks_cache_reloaded line")
    assert deployment.main_pid("blue") == before
    subs, bodies = deployment.bodies(1)
    assert deployment.post(bodies) == [(200, "applied")]


def test_kill_9_restarts_and_loses_nothing_answered_200(deployment, installed):
    machine = deployment.machine
    before = deployment.main_pid("blue")
    subs, bodies = deployment.bodies(400)
    stop_file = deployment.workdir / "stop-kill"
    load = deployment.start_load(bodies, stop_file)
    machine.wait_for(lambda: int(deployment.redis("XLEN", "siwa:events").split()[-1]) > 20, 60, "load under way")
    machine.run(["kill", "-9", str(before)])
    machine.wait_for(lambda: deployment.main_pid("blue") not in (0, before), 30, "slot blue restarted")
    output, _ = load.communicate(timeout=300)
    results = [json.loads(line) for line in output.splitlines()][:-1]
    answered = [subs[r["index"]] for r in results if r["status"] == 200]
    assert len(answered) > 20
    assert int(machine.property("siwa-endpoint@blue", "NRestarts")) >= 1
    counts = deployment.stream_count_by_sub()
    assert [sub for sub in answered if counts.get(sub) != 1] == []


def test_a_bad_setting_keeps_the_slot_down_without_a_restart_loop(deployment, installed):
    machine = deployment.machine
    dropin = "/run/systemd/system/siwa-endpoint@green.service.d/bad-setting.conf"
    machine.put(dropin, "[Service]\nEnvironment=SIWA_WORKERS=many\n")
    machine.run(["systemctl", "daemon-reload"])
    try:
        machine.run(["systemctl", "start", "siwa-endpoint@green"], check=False)
        machine.wait_for(lambda: machine.property("siwa-endpoint@green", "ActiveState") == "failed", 30,
                         "slot green failed")
        assert machine.property("siwa-endpoint@green", "ExecMainStatus") == "2"
        # Three times RestartSec: a restart loop would have restarted it by now.
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            assert machine.property("siwa-endpoint@green", "NRestarts") == "0"
            assert machine.property("siwa-endpoint@green", "ActiveState") == "failed"
            time.sleep(0.5)
        errors = deployment.journal("siwa-endpoint@green", "-p", "err")
        refusals = [json.loads(e["MESSAGE"]) for e in errors if e.get("SYSLOG_IDENTIFIER") == "siwa-endpoint"]
        assert [(r["event"], r["setting"]) for r in refusals] == [("configuration_invalid", "SIWA_WORKERS")]
        assert [e["PRIORITY"] for e in errors if e.get("SYSLOG_IDENTIFIER") == "siwa-endpoint"] == ["3"]
    finally:
        machine.run(["rm", "-f", dropin])
        machine.run(["systemctl", "daemon-reload"])
        machine.run(["systemctl", "reset-failed", "siwa-endpoint@green"], check=False)


def test_the_journal_has_each_line_at_its_priority_and_every_line_is_json(deployment, installed):
    lines = [e for e in deployment.journal("siwa-endpoint@blue") if e.get("SYSLOG_IDENTIFIER") == "siwa-endpoint"]
    assert lines
    by_level = {"info": "6", "warning": "4", "error": "3"}
    for entry in lines:
        document = json.loads(entry["MESSAGE"])
        assert entry["PRIORITY"] == by_level[document["level"]], entry["MESSAGE"]
    assert {"started", "request"} <= {json.loads(e["MESSAGE"])["event"] for e in lines}


def test_stop_ends_within_timeout_stop_sec(deployment, installed):
    machine = deployment.machine
    assert machine.property("siwa-endpoint@blue", "TimeoutStopUSec") == "20s"
    started = time.monotonic()
    machine.run(["systemctl", "stop", "siwa-endpoint@blue"], timeout=60)
    elapsed = time.monotonic() - started
    assert elapsed < 20
    assert machine.property("siwa-endpoint@blue", "Result") == "success"
    assert machine.property("siwa-endpoint@blue", "ExecMainStatus") == "0"
    machine.run(["systemctl", "start", "siwa-endpoint@blue"])
    machine.wait_for(lambda: machine.run(["/usr/bin/siwa-endpoint", "status", "--socket",
                                          "/run/siwa-endpoint/blue.sock"], check=False).returncode == 0,
                     60, "slot blue healthy again")


def upgrade_under_load(deployment, deb, extra=()):
    machine = deployment.machine
    machine.put_file("/root/next.deb", deb)
    subs, bodies = deployment.bodies(4000)
    stop_file = deployment.workdir / f"stop-{deb.name}"
    load = deployment.start_load(bodies, stop_file)
    machine.wait_for(lambda: int(deployment.redis("XLEN", "siwa:events").split()[-1]) > 0, 60, "load under way")
    before = len(deployment.stream_count_by_sub())
    assert before >= 0
    result = machine.run(["apt-get", "install", "-y", "--no-install-recommends", *extra, "/root/next.deb"],
                         timeout=300)
    stop_file.touch()
    output, _ = load.communicate(timeout=300)
    lines = [json.loads(line) for line in output.splitlines()]
    assert lines[-1] == {"stopped": True}, "the load ran out before the upgrade finished"
    answered = [(subs[r["index"]], r["status"]) for r in lines[:-1] if r["status"] is not None]
    return result, answered


def test_an_upgrade_under_load_answers_every_notification_2xx_and_applies_each_once(deployment, installed):
    machine = deployment.machine
    newer, version = restamped(package_path(), 2, deployment.workdir)
    assert deployment.active_slot() == "blue"
    result, answered = upgrade_under_load(deployment, newer)
    assert "done: slot green serves" in result.stdout + result.stderr
    assert machine.run(["dpkg-query", "-W", "-f", "${Version}", "siwa-endpoint"]).stdout == version
    assert deployment.active_slot() == "green"
    assert machine.property("siwa-endpoint@blue", "ActiveState") == "inactive"
    assert machine.run(["systemctl", "is-enabled", "siwa-endpoint@green"]).stdout.strip() == "enabled"
    assert len(answered) > 50
    assert [status for _, status in answered if status != 200] == []
    counts = deployment.stream_count_by_sub()
    assert [sub for sub, _ in answered if counts.get(sub) != 1] == []


def test_a_rollback_to_the_previous_version_the_same_way(deployment, installed):
    machine = deployment.machine
    result, answered = upgrade_under_load(deployment, package_path(), extra=("--allow-downgrades",))
    assert "done: slot blue serves" in result.stdout + result.stderr
    assert re.fullmatch(r"\S+-1(\+deb\d+)?", machine.run(["dpkg-query", "-W", "-f", "${Version}",
                                                          "siwa-endpoint"]).stdout)
    assert deployment.active_slot() == "blue"
    assert [status for _, status in answered if status != 200] == []
    counts = deployment.stream_count_by_sub()
    assert [sub for sub, _ in answered if counts.get(sub) != 1] == []


def test_a_reboot_brings_every_enabled_slot_back(deployment, installed):
    machine = deployment.machine
    enabled = [slot for slot in ("blue", "green")
               if machine.run(["systemctl", "is-enabled", f"siwa-endpoint@{slot}"], check=False).stdout.strip()
               == "enabled"]
    assert enabled == ["blue"]
    machine.reboot()
    machine.wait_for(lambda: machine.run(["/usr/bin/siwa-endpoint", "status", "--socket",
                                          "/run/siwa-endpoint/blue.sock"], check=False).returncode == 0,
                     60, "slot blue healthy after the reboot")
    subs, bodies = deployment.bodies(1)
    assert deployment.post(bodies) == [(200, "applied")]
    assert machine.property("siwa-endpoint@green", "ActiveState") == "inactive"


def test_purge_removes_the_configuration_but_keeps_a_spool_that_holds_notifications(deployment, installed):
    machine = deployment.machine
    machine.run(["systemctl", "stop", "redis-server"])
    subs, bodies = deployment.bodies(1)
    assert deployment.post(bodies) == [(200, "spooled")]
    result = machine.run(["apt-get", "purge", "-y", "siwa-endpoint"], timeout=300)
    assert "kept /var/lib/siwa-endpoint/spool-blue" in result.stdout
    assert machine.run(["test", "-e", "/etc/siwa-endpoint"], check=False).returncode == 1
    assert machine.run(["test", "-e", "/etc/nginx/siwa-endpoint-upstream.conf"], check=False).returncode == 1
    assert machine.run(["test", "-e", "/var/lib/siwa-endpoint-reconcile"], check=False).returncode == 1
    held = machine.sh("cat /var/lib/siwa-endpoint/spool-blue/segment-*.log").stdout
    assert subs[0] in held
    assert machine.property("siwa-endpoint@blue", "LoadState") == "not-found"
    # remove (the first half of purge) stopped every slot and took the site out of nginx,
    # which still runs.
    assert machine.run(["systemctl", "list-units", "--state=active", "--no-legend", "siwa-endpoint@*"]).stdout == ""
    assert machine.run(["test", "-e", "/etc/nginx/sites-enabled/siwa-endpoint.conf"], check=False).returncode == 1
    assert machine.run(["systemctl", "is-active", "nginx"]).stdout.strip() == "active"
