"""The package's maintainer scripts run as root; the service user owns /var/lib/siwa-endpoint.
What it plants there (links to a root-only file and directory, a FIFO, a spool holding only
a link) must not make postrm purge (or prerm remove) touch a root-only file or hang. Run
for real as root, in a private mount namespace (unshare) whose /etc, /var/lib and /run
are empty tmpfs, so the scripts' absolute paths reach nothing of this machine."""

import os
import shutil
import subprocess

import pytest

from deploy_harness import REPO

DEBIAN = REPO / "debian"
SERVICE_UID = 65534  # nobody, standing in for the siwa-endpoint user

SETUP = r"""
set -eu
mount -t tmpfs -o mode=0755 tmpfs /etc
mount -t tmpfs -o mode=0755 tmpfs /var/lib
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /etc/nginx/sites-enabled /etc/siwa-endpoint /var/lib/siwa-endpoint-rollout
: >/etc/nginx/.siwa-endpoint-rollout.lock
mkdir -m 0700 /etc/root-only
printf "root's own\n" >/etc/root-only/secret
chmod 0600 /etc/root-only/secret
state=/var/lib/siwa-endpoint
mkdir -m 0750 $state
ln -s /etc/root-only/secret $state/jwks.json
ln -s /etc/root-only/secret $state/rollout.lock
ln -s /etc/root-only $state/spool-linked
mkfifo $state/spool-fifo
mkdir $state/spool-blue
ln -s /etc/root-only/secret $state/spool-blue/segment-0000000000000001.log
ln -s /etc/root-only $state/spool-blue/rejected
mkdir $state/spool-green
printf 'a record\n' >$state/spool-green/segment-0000000000000002.log
chown -hR {uid}:{uid} $state
status=0
timeout 30 sh {script} {action} || status=$?
echo "exit=$status"
echo "secret=$(cat /etc/root-only/secret)"
echo "root-only=$(ls -A /etc/root-only | tr '\n' ' ')"
echo "green=$(ls -A $state/spool-green 2>&1 | tr '\n' ' ')"
echo "state=$(ls -A $state 2>&1 | tr '\n' ' ')"
echo "rollout=$(ls -A /etc/nginx/.siwa-endpoint-rollout.lock /var/lib/siwa-endpoint-rollout 2>/dev/null | tr '\n' ' ')"
"""


def run_in_namespace(script, action):
    unshare = shutil.which("unshare")
    assert unshare is not None
    assert os.geteuid() == 0, "the maintainer scripts run as root"
    result = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c",
         SETUP.format(uid=SERVICE_UID, script=DEBIAN / f"siwa-endpoint.{script}", action=action)],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line), result.stdout


@pytest.mark.parametrize("script, action", [("postrm", "purge"), ("prerm", "remove"), ("postrm", "remove")])
def test_maintainer_scripts_touch_nothing_through_what_the_service_user_planted(script, action):
    facts, output = run_in_namespace(script, action)
    assert facts["exit"] == "0", output
    assert facts["secret"] == "root's own", output
    assert facts["root-only"].split() == ["secret"], output
    # A spool holding a record is kept, whole; the FIFO is left where it is.
    assert facts["green"].split() == ["segment-0000000000000002.log"], output
    assert "spool-fifo" in facts["state"].split(), output
    if (script, action) == ("postrm", "purge"):
        assert "kept /var/lib/siwa-endpoint/spool-green" in output
        # The spool that held only links went (the links, never what they named).
        assert "spool-blue" not in facts["state"].split() and "spool-linked" not in facts["state"].split()
        # The rollout's lock and direct-mode state go too; the old lock's name (a link here) as a link.
        assert facts["rollout"].strip() == "", output
        assert "rollout.lock" not in facts["state"].split() and "jwks.json" not in facts["state"].split()
