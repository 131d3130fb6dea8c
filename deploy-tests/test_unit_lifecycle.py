"""The shipped unit's lifecycle: it restarts the slot on any exit systemd did not ask
for (a death by SIGHUP or SIGPIPE counts as clean for systemd, so on-failure would
leave the slot down), never for a refused setting (exit 2), and `systemctl reload`
sends SIGHUP, which serve takes as "re-read the JWKS cache file". Checked by
systemd-analyze (no systemd runs here to kill the service under)."""

import shutil
import subprocess

from deploy_harness import REPO, unit_service_lines
from stack import build_binary, find_binary

UNIT = REPO / "deploy" / "siwa-endpoint@.service"


def test_unit_restarts_on_any_exit_it_did_not_ask_for():
    service = unit_service_lines(UNIT)
    restart = [line for line in service if line.startswith("Restart=")]
    assert restart == ["Restart=always"]
    assert "RestartPreventExitStatus=2" in service
    assert "ExecReload=/bin/kill -HUP $MAINPID" in service
    # No SuccessExitStatus: with Restart=always it would change nothing, and a clean
    # exit must not be widened to signals either.
    assert not [line for line in service if line.startswith("SuccessExitStatus=")]


def test_unit_with_reload_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze is missing (scripts/install-deps installs the systemd package)"
    binary = find_binary() or build_binary()
    unit = UNIT.read_text().replace("/usr/local/lib/siwa-endpoint/current-%i/siwa-endpoint", str(binary))
    path = tmp_path / "siwa-endpoint@blue.service"
    path.write_text(unit)
    result = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""
