"""The webhook deliverer's unit (deploy/siwa-endpoint-deliver.service) passes systemd-analyze
verify, runs as its own user with reconcile's sandbox, no core dump, restarts on failure but
never on a refused setting (exit 2); serve's unit cannot see the signing keys; the example
destinations file has the fields the deliverer reads. No systemd runs here to start it."""

import ipaddress
import json
import shutil
import subprocess
import urllib.parse

from deploy_harness import REPO, unit_service_lines
from stack import build_binary, find_binary

DEPLOY = REPO / "deploy"
UNIT = DEPLOY / "siwa-endpoint-deliver.service"
INSTALLED = "/usr/local/lib/siwa-endpoint/current-live/siwa-endpoint"


def test_deliver_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze is missing (scripts/install-deps installs the systemd package)"
    unit = UNIT.read_text()
    assert unit.count(INSTALLED) == 1
    # verify checks that ExecStart's binary exists: the installed path becomes the binary under test.
    path = tmp_path / "siwa-endpoint-deliver.service"
    path.write_text(unit.replace(INSTALLED, str(find_binary() or build_binary())))
    result = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""


def test_deliver_unit_runs_as_its_own_user_in_reconciles_sandbox():
    service = unit_service_lines(UNIT)
    exec_start = next(line for line in service if line.startswith("ExecStart="))
    assert exec_start.split()[1:] == ["deliver", "--env-file", "/etc/siwa-endpoint/env"]
    for setting in ("Type=exec", "User=siwa-endpoint-deliver", "Group=siwa-endpoint-deliver",
                    "SupplementaryGroups=siwa-endpoint", "Restart=on-failure", "RestartPreventExitStatus=2",
                    "LimitCORE=0", "UMask=0077", "Environment=SWIFT_BACKTRACE=enable=no",
                    "Environment=SIWA_WEBHOOK_DESTINATIONS=/etc/siwa-endpoint/webhooks.json",
                    "InaccessiblePaths=-/var/lib/siwa-endpoint-reconcile -/etc/siwa-endpoint/reconcile"):
        assert setting in service, setting
    # Every sandboxing line of reconcile's unit, unchanged (what differs: the job, the
    # user, its state directory and its run time).
    differs = ("Type=", "ExecStart=", "User=", "Group=", "SupplementaryGroups=", "StateDirectory",
               "TimeoutStartSec=")
    sandbox = [line for line in unit_service_lines(DEPLOY / "siwa-endpoint-reconcile.service") if not line.startswith(differs)]
    assert len(sandbox) > 25
    assert [line for line in sandbox if line not in service] == []
    assert not [line for line in service if line.startswith(("StateDirectory", "ReadWritePaths", "ExecStartPre="))]


def test_deliver_unit_denies_every_cloud_metadata_address():
    # systemd's "link-local" is 169.254.0.0/16 and fe80::/64.
    named = {"link-local": ["169.254.0.0/16", "fe80::/64"]}
    denied = []
    for line in unit_service_lines(UNIT):
        if line.startswith("IPAddressDeny="):
            for value in line.split("=", 1)[1].split():
                denied += [ipaddress.ip_network(network) for network in named.get(value, [value])]
    metadata = ["169.254.169.254", "fd00:ec2::254", "fd20:ce::254", "100.100.100.200", "192.0.0.192",
                "64:ff9b::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe", "fe80::a9fe:a9fe"]
    for address in metadata:
        assert any(ipaddress.ip_address(address) in network for network in denied), address
    assert "EnvironmentFile=-/etc/siwa-endpoint/deliver.env" in unit_service_lines(UNIT)


def test_serve_cannot_see_the_webhook_keys():
    inaccessible = next(line for line in unit_service_lines(DEPLOY / "siwa-endpoint@.service")
                        if line.startswith("InaccessiblePaths="))
    assert "-/etc/siwa-endpoint/webhook-keys" in inaccessible.split("=", 1)[1].split()


def test_destinations_example_has_the_fields_the_deliverer_reads():
    destinations = json.loads((DEPLOY / "webhooks.json.example").read_text())["destinations"]
    fields = {"name", "url", "signing_key_files", "types", "client_ids", "include_email", "ca_file",
              "allow_private_address", "format"}
    required = {"name", "url", "signing_key_files"}
    known_types = {"email-disabled", "email-enabled", "consent-revoked", "account-deleted", "unknown"}
    assert len({destination["name"] for destination in destinations}) == len(destinations) >= 2
    for destination in destinations:
        assert required <= destination.keys() <= fields
        assert urllib.parse.urlsplit(destination["url"]).scheme == "https"
        assert all(key.startswith("/etc/siwa-endpoint/webhook-keys/") and key.endswith(".key")
                   for key in destination["signing_key_files"])
        assert set(destination.get("types", [])) <= known_types
        assert destination.get("format", "standard-webhooks") == "standard-webhooks"
