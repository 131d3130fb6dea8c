"""Short runs of scripts/soak (the long one is the command): real redis-server data
nodes and sentinels, or a real Redis Cluster, the real serve and its spool, every fault
injected at least once while notifications for 60 users are posted; nothing answered 200
lost or doubled, every user's hash what the contract's rules give (deploy-tests/soak_model.py)."""

import re
import subprocess

from deploy_harness import REPO
from soak import CLUSTER_FAULTS, FAULTS, PAUSE_SECONDS, FaultPlan, recorded_rounds
from stack import build_binary, find_binary

SOAK = REPO / "scripts" / "soak"


def test_short_soak_loses_nothing_under_combined_faults():
    binary = find_binary() or build_binary()
    # Bounded: 75 s of posting and faults (the recorded rounds first), then retries, the drain and the check.
    replays = recorded_rounds("sentinel")
    result = subprocess.run([str(SOAK), "--seconds", "75", "--users", "60", "--rate", "8", *replay_args(replays)],
                            env={"PATH": "/usr/bin:/bin", "SIWA_ENDPOINT_BINARY": str(binary)},
                            capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert ("soak: result: lost 0, doubled 0, unexpected 0, wrong entries 0, users wrong 0, never answered 200 0"
            in output), output
    assert_drawn_and_replayed(output, replays, FAULTS)
    faults = dict(re.findall(r"([a-z-]+) (\d+)", re.search(r"^soak: faults: (.*)$", output, re.M).group(1)))
    assert sorted(faults) == sorted(FAULTS) and all(int(count) >= 1 for count in faults.values()), output
    # The faults reached the spool, and every notification signed is in the stream once.
    outcomes = re.search(r"^soak: outcomes: (.*)$", output, re.M).group(1)
    assert int(re.search(r"200 spooled (\d+)", outcomes).group(1)) > 0, output
    signed = int(re.search(r"^soak: posts: \d+ \((\d+) notifications", output, re.M).group(1))
    assert re.search(rf"^soak: stream: {signed} entries; users: 60$", output, re.M), output


def test_short_cluster_soak_loses_nothing_under_cluster_faults():
    """The same pool and checks against a Redis Cluster (three primaries, three replicas):
    the slot's primary SIGKILLed, the next one SIGSTOPped for a drawn 1.5 s to 6 s (across
    the node timeout), the slot migrated to another primary under load (ASK during the
    move, MOVED after), serve SIGKILLed, a replica lost, SIGHUP."""
    binary = find_binary() or build_binary()
    # Bounded: 45 s of posting and faults (every fault runs once even if that takes longer,
    # the recorded rounds first), then retries, the drain and the check.
    replays = recorded_rounds("cluster")
    result = subprocess.run([str(SOAK), "--cluster", "--seconds", "45", "--users", "60", "--rate", "8",
                             *replay_args(replays)],
                            env={"PATH": "/usr/bin:/bin", "SIWA_ENDPOINT_BINARY": str(binary)},
                            capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert ("soak: result: lost 0, doubled 0, unexpected 0, wrong entries 0, users wrong 0, never answered 200 0"
            in output), output
    assert_drawn_and_replayed(output, replays, CLUSTER_FAULTS)
    faults = dict(re.findall(r"([a-z-]+) (\d+)", re.search(r"^soak: faults: (.*)$", output, re.M).group(1)))
    assert sorted(faults) == sorted(CLUSTER_FAULTS) and all(int(count) >= 1 for count in faults.values()), output
    # serve met the migration: ASK while the keys moved, MOVED once the slot was the target's.
    redirects = re.search(r"^soak: redirects during and after the migrations: ASK (\d+), MOVED (\d+)$", output, re.M)
    assert redirects and int(redirects.group(1)) >= 1 and int(redirects.group(2)) >= 1, output
    outcomes = re.search(r"^soak: outcomes: (.*)$", output, re.M).group(1)
    assert int(re.search(r"200 spooled (\d+)", outcomes).group(1)) > 0, output
    signed = int(re.search(r"^soak: posts: \d+ \((\d+) notifications", output, re.M).group(1))
    assert re.search(rf"^soak: stream: {signed} entries; users: 60$", output, re.M), output


def replay_args(rounds):
    return [argument for seed, number in rounds for argument in ("--replay", f"{seed}:{number}")]


def assert_drawn_and_replayed(output, replays, faults):
    """The seed printed first; the recorded rounds ran first, each fault of them once."""
    assert re.match(r"soak: seed \d+ \(scripts/soak --seed \d+ draws the same", output), output
    names = re.findall(r"^soak: \+ *\d+ s  round (\d+:\d+), [\d.]+ ms after a post: ", output, re.M)
    replayed = [f"{seed}:{number}" for seed, number in replays]
    expected = [name for name in replayed for _ in faults]
    assert names[:len(expected)] == expected, output


def test_the_fault_plan_is_drawn_from_the_seed():
    """A round is drawn from its seed and number alone: the same twice, every fault once in
    a drawn order, pauses across the failover window (before the sentinels' 2 s and well
    after it), and a replayed round comes first, whole."""
    plan = FaultPlan(415293, FAULTS)
    assert plan.round(415293, 2) == FaultPlan(415293, FAULTS).round(415293, 2)
    rounds = [plan.round(seed, 0) for seed in range(1, 41)]
    assert all(sorted(fault for fault, _, _ in turns) == sorted(FAULTS) for turns in rounds)
    assert len({tuple(fault for fault, _, _ in turns) for turns in rounds}) > 10, "the order is drawn"
    pauses = [timing["pause s"] for turns in rounds for fault, _, timing in turns if fault == "primary-paused"]
    assert len(pauses) == 40 and all(PAUSE_SECONDS[0] <= pause <= PAUSE_SECONDS[1] for pause in pauses)
    assert PAUSE_SECONDS == (1.5, 6.0)
    assert min(pauses) < 2.0 and max(pauses) > 5.0 and any(2.5 <= pause <= 3.5 for pause in pauses), pauses
    moments = [timing["signal after post ms"] for turns in rounds for _, _, timing in turns]
    assert all(0 <= moment <= 25 for moment in moments) and len(set(moments)) > 100
    replaying = FaultPlan(7, FAULTS, [(415293, 2)])
    turns = replaying.turns()
    assert [next(turns) for _ in range(2 * len(FAULTS))] == plan.round(415293, 2) + replaying.round(7, 0)
    assert replaying.minimum_turns == len(FAULTS)
    assert FaultPlan(7, FAULTS, [(1, 0), (2, 0)]).minimum_turns == 2 * len(FAULTS)


def test_the_recorded_rounds_are_read_by_mode(tmp_path):
    listed = tmp_path / "seeds.txt"
    listed.write_text("# a comment line\nsentinel 415293:2  # 2026-12-04: a loss\n\ncluster 12:0\nsentinel 9:1\n")
    assert recorded_rounds("sentinel", listed) == [(415293, 2), (9, 1)]
    assert recorded_rounds("cluster", listed) == [(12, 0)]
    for mode in ("sentinel", "cluster"):
        recorded_rounds(mode)  # the shipped list parses


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
