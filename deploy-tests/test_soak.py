"""Short runs of scripts/soak (the long one is the command): real redis-server data
nodes and sentinels, or a real Redis Cluster, the real serve and its spool, every fault
injected at least once while notifications for 60 users are posted; nothing answered 200
lost or doubled, every user's hash what the contract's rules give (deploy-tests/soak_model.py)."""

import re
import subprocess

from deploy_harness import REPO
from soak import CLUSTER_FAULTS, FAULTS
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


def test_short_cluster_soak_loses_nothing_under_cluster_faults():
    """The same pool and checks against a Redis Cluster (three primaries, three replicas):
    the slot's primary SIGKILLed, the next one SIGSTOPped past the node timeout, the slot
    migrated to another primary under load (ASK during the move, MOVED after), serve
    SIGKILLed, a replica lost, SIGHUP."""
    binary = find_binary() or build_binary()
    # Bounded: 45 s of posting and faults (every fault runs once even if that takes longer),
    # then retries, the drain and the check.
    result = subprocess.run([str(SOAK), "--cluster", "--seconds", "45", "--users", "60", "--rate", "8"],
                            env={"PATH": "/usr/bin:/bin", "SIWA_ENDPOINT_BINARY": str(binary)},
                            capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert ("soak: result: lost 0, doubled 0, unexpected 0, wrong entries 0, users wrong 0, never answered 200 0"
            in output), output
    faults = dict(re.findall(r"([a-z-]+) (\d+)", re.search(r"^soak: faults: (.*)$", output, re.M).group(1)))
    assert sorted(faults) == sorted(CLUSTER_FAULTS) and all(int(count) >= 1 for count in faults.values()), output
    # serve met the migration: ASK while the keys moved, MOVED once the slot was the target's.
    redirects = re.search(r"^soak: redirects during and after the migrations: ASK (\d+), MOVED (\d+)$", output, re.M)
    assert redirects and int(redirects.group(1)) >= 1 and int(redirects.group(2)) >= 1, output
    outcomes = re.search(r"^soak: outcomes: (.*)$", output, re.M).group(1)
    assert int(re.search(r"200 spooled (\d+)", outcomes).group(1)) > 0, output
    signed = int(re.search(r"^soak: posts: \d+ \((\d+) notifications", output, re.M).group(1))
    assert re.search(rf"^soak: stream: {signed} entries; users: 60$", output, re.M), output


def test_the_model_follows_the_contracts_rules():
    """The soak's model on hand-made cases, so a wrong model cannot pass wrong Redis."""
    from soak_model import Notification, expected_user, user_problems

    enabled = Notification("s", "email-enabled", 1000, "j1", "a@privaterelay.example.com", True)
    disabled = Notification("s", "email-disabled", 3000, "j2", "b@privaterelay.example.com", False)
    revoked_late = Notification("s", "consent-revoked", 5000, "j3")
    revoked_early = Notification("s", "consent-revoked", 2000, "j4")
    deleted = Notification("s", "account-delete", 4000, "j5")  # the older spelling
    unknown = Notification("s", "apple-future-type", 9000, "j6")

    exact, bounds = expected_user([disabled, enabled, revoked_early, revoked_late, unknown])
    assert bounds == {}
    assert exact == {"consent_revoked_at": "5000", "account_deleted_at": None, "sessions_revoked_at": "5000",
                     "refresh_token_refused_at": None, "email": "b@privaterelay.example.com",
                     "is_private_email": "false", "email_forwarding": "disabled", "email_forwarding_at": "3000",
                     "last_event_type": "consent-revoked", "last_event_at": "5000", "last_jti": "j3"}

    exact, bounds = expected_user([enabled, deleted, revoked_early])
    assert exact["email"] is None and exact["is_private_email"] is None and exact["email_forwarding"] == "disabled"
    assert exact["account_deleted_at"] == "4000" and exact["sessions_revoked_at"] == "4000"
    assert bounds == {"email_forwarding_at": (4000, 4000), "last_event_at": (4000, 4000)}

    assert expected_user([unknown]) == ({}, {})
    assert user_problems([unknown], {"updated_at": "1"}) == ["a hash exists for unknown types only: ['updated_at']"]
    stored = {"consent_revoked_at": "2000", "sessions_revoked_at": "2000", "last_event_type": "consent-revoked",
              "last_event_at": "2000", "last_jti": "j4", "updated_at": "1"}
    assert user_problems([revoked_early, revoked_late], stored) == [
        "consent_revoked_at: stored '2000', the rules give '5000'",
        "sessions_revoked_at: stored '2000', the rules give '5000'",
        "last_event_at: stored '2000', the rules give '5000'",
        "last_jti: stored 'j4', the rules give 'j3'",
    ]
    stored.update(consent_revoked_at="5000", sessions_revoked_at="5000", last_event_at="5000", last_jti="j3")
    assert user_problems([revoked_early, revoked_late], stored) == []
