"""A short run of scripts/soak (the long one is the command): real redis-server data
nodes and sentinels, the real serve and its spool, every fault injected at least once
while notifications for 60 users are posted; nothing answered 200 lost or doubled, every
user's hash what the contract's rules give (deploy-tests/soak_model.py)."""

import re
import subprocess

from deploy_harness import REPO
from soak import FAULTS
from stack import build_binary, find_binary

SOAK = REPO / "scripts" / "soak"


def test_short_soak_loses_nothing_under_combined_faults():
    binary = find_binary() or build_binary()
    # Bounded: 75 s of posting and faults, then retries, the drain and the check.
    result = subprocess.run([str(SOAK), "--seconds", "75", "--users", "60", "--rate", "8"],
                            env={"PATH": "/usr/bin:/bin", "SIWA_ENDPOINT_BINARY": str(binary)},
                            capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert ("soak: result: lost 0, doubled 0, unexpected 0, wrong entries 0, users wrong 0, never answered 200 0"
            in output), output
    faults = dict(re.findall(r"([a-z-]+) (\d+)", re.search(r"^soak: faults: (.*)$", output, re.M).group(1)))
    assert sorted(faults) == sorted(FAULTS) and all(int(count) >= 1 for count in faults.values()), output
    # The faults reached the spool, and every notification signed is in the stream once.
    outcomes = re.search(r"^soak: outcomes: (.*)$", output, re.M).group(1)
    assert int(re.search(r"200 spooled (\d+)", outcomes).group(1)) > 0, output
    signed = int(re.search(r"^soak: posts: \d+ \((\d+) notifications", output, re.M).group(1))
    assert re.search(rf"^soak: stream: {signed} entries; users: 60$", output, re.M), output
