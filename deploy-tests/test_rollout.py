"""scripts/rollout against real parts: the siwa-endpoint binary, redis-server, nginx
rendered from the shipped files (TLS on loopback), with --manager direct; and
scripts/install into a temp root, with the shipped systemd unit checked by
systemd-analyze."""

import hashlib
import json
import os
import pathlib
import pwd
import re
import shutil
import stat
import subprocess
import time

import pytest

from deploy_harness import REPO
from fault_under_load import PacedLoad
from rollout_stack import INSTALL, RedisGate, RolloutStack, process_alive, wait_for
from stack import build_binary, find_binary

DEPLOY = REPO / "deploy"


@pytest.fixture(scope="module")
def binary():
    return find_binary() or build_binary()


@pytest.fixture(scope="module")
def stack(workdir, binary, rsa_cert):
    rollout_stack = RolloutStack(workdir / "rollout", binary, *rsa_cert)
    try:
        first = rollout_stack.rollout()
        assert first.returncode == 0, first.stdout + first.stderr
        assert "first deployment onto slot blue" in first.stdout
        assert rollout_stack.upstream_slot() == "blue"
        yield rollout_stack
    finally:
        rollout_stack.stop()


def notification_lands(stack, sub):
    status, answer = stack.post(stack.sign(sub))
    return status == 200 and answer == {"status": "applied"} and stack.user_exists(sub)


# ---- Zero-downtime rollout --------------------------------------------------------------

def test_rollout_under_traffic_answers_every_notification_and_loses_none(stack):
    old_slot = stack.upstream_slot()
    new_slot = {"blue": "green", "green": "blue"}[old_slot]
    old_pid = stack.pid(old_slot)
    assert old_pid is not None and process_alive(old_pid)
    stream_before = stack.stream_length()
    served_before = {slot: sum(1 for line in stack.log_lines(slot) if line.get("path") == "/apple/notifications")
                     for slot in ("blue", "green")}

    # A paced stream (3 threads, 10 a second each, one fresh TLS connection per
    # notification) that starts before the rollout and goes on until well after it,
    # whatever the rollout takes on a loaded machine: the rollout begins once answers
    # flow (not after a fixed sleep), and each thread stops only once the rollout has
    # ended and it has had `after` more answers, and at least `minimum` were sent in all.
    minimum = 300
    subs, bodies = stack.sign_count(f"000{int(time.time())}.rollout", 3000)
    load = PacedLoad(stack.post, bodies, threads=3, interval=0.1, minimum=minimum, after=10)
    # The rollout starts while notifications flow: once 30 have been answered.
    result = load.run(lambda _: stack.rollout(timeout=90), fault_after=30)
    indexes = sorted(load.sent)
    count = len(indexes)
    assert count >= minimum
    subs = [subs[index] for index in indexes]
    answers = [load.answers[index] for index in indexes]
    answered_at = [load.answered_at[index] for index in indexes if load.answered_at[index] is not None]

    assert result.returncode == 0, result.stdout + result.stderr
    assert load.errors == []
    non_2xx = [(subs[i], answer) for i, answer in enumerate(answers) if answer is None or not 200 <= answer[0] < 300]
    assert non_2xx == []
    assert [answer[1] for answer in answers] == [{"status": "applied"}] * count

    # The stream really overlapped the switch: both slots answered notifications.
    def served(slot):
        return sum(1 for line in stack.log_lines(slot) if line.get("path") == "/apple/notifications") - served_before[slot]

    assert served(old_slot) > 0 and served(new_slot) > 0, (served(old_slot), served(new_slot))
    assert served(old_slot) + served(new_slot) == count
    assert any(moment < load.fault_started for moment in answered_at)
    assert any(moment > load.fault_finished for moment in answered_at)

    # Every notification answered 2xx is in Redis.
    missing = [sub for sub in subs if not stack.user_exists(sub)]
    assert missing == []
    assert stack.stream_length() - stream_before == count

    # The old slot's process has exited; nginx names the new socket; the new slot runs.
    # (bounded generously: the rollout waited for the exit; only the reaping may lag)
    assert wait_for(lambda: not process_alive(old_pid), 30)
    assert not (stack.state_dir / f"{old_slot}.pid").exists()
    assert not stack.socket(old_slot).exists()
    assert stack.upstream_slot() == new_slot
    assert process_alive(stack.pid(new_slot))
    assert "the old nginx workers have exited" in result.stdout
    assert "spool depth of slot %s: 0" % old_slot in result.stdout
    assert os.readlink(stack.lib_dir / f"current-{new_slot}").startswith("releases/")
    # The reconcile unit's link follows the release nginx serves.
    assert os.readlink(stack.lib_dir / "current-live") == os.readlink(stack.lib_dir / f"current-{new_slot}")


# ---- The old slot's spool is drained before the old slot stops ---------------------------

def test_rollout_waits_for_the_old_slots_spool_to_drain(stack, workdir, binary):
    # The slot to be replaced reaches Redis only through a gate the test holds (a wrapper
    # binary: the environment wins over the env file); the new slot goes to Redis
    # straight. With the gate shut, the old slot answers `200 spooled`; the rollout then
    # finds its spool non-empty, and the gate opens only once the rollout says it waits.
    gate = RedisGate(stack.redis.port)
    try:
        gated = gate.wrap(workdir / "gated-serves", binary)
        onto_gate = stack.rollout(gated)
        assert onto_gate.returncode == 0, onto_gate.stdout + onto_gate.stderr
        old_slot = stack.upstream_slot()
        old_pid = stack.pid(old_slot)
        assert gate.relayed > 0, "the gated slot reaches Redis through the gate"
        assert stack.spool_status(old_slot)["depth"] == 0

        gate.shut()
        subs, bodies = stack.sign_count(f"000100.drain{time.time_ns()}", 12)
        stream_before = stack.stream_length()
        for sub, body in zip(subs, bodies):
            assert stack.post(body) == (200, {"status": "spooled"}), sub
        assert stack.spool_status(old_slot)["depth"] == len(subs)
        assert not any(stack.user_exists(sub) for sub in subs)

        def while_waiting():
            # The rollout waits; the old slot still runs and nothing has reached Redis yet.
            assert process_alive(old_pid)
            assert not any(stack.user_exists(sub) for sub in subs)
            gate.open()

        returncode, output = stack.rollout_held(f"slot {old_slot} holds {len(subs)} spooled notifications: waiting",
                                                while_waiting, timeout=90)
        assert returncode == 0, output

        assert f"spool depth of slot {old_slot}: 0" in output
        assert not process_alive(old_pid)
        assert stack.upstream_slot() != old_slot
        # Each spooled notification is in Redis exactly once: one stream entry, its state.
        stream = stack.stream_subs()
        assert [stream.count(sub) for sub in subs] == [1] * len(subs)
        assert stack.stream_length() - stream_before == len(subs)
        assert all(stack.user_exists(sub) for sub in subs)
        # The old slot replayed them itself, before it was stopped, and its spool is empty.
        log = stack.log_lines(old_slot)  # the slot's log file collects every run of that slot: this run's part
        starts = [index for index, line in enumerate(log)
                  if line.get("event") == "started" and line.get("pid") == old_pid]
        assert len(starts) == 1, starts
        replayed = [line for line in log[starts[0]:] if line.get("event") == "spool_replayed"]
        assert sum(line.get("applied", 0) for line in replayed) == len(subs)
        status = stack.spool_status(old_slot)
        assert (status["depth"], status["set_aside"], status["torn_files"]) == (0, 0, 0)
    finally:
        gate.stop()


# ---- Broken builds roll back ---------------------------------------------------------

def assert_rolled_back(stack, result, upstream_before, active, active_pid, idle_link_before):
    assert result.returncode == 1, result.stdout + result.stderr
    assert "rollout aborted: nginx and slot %s are untouched" % active in result.stderr
    assert stack.upstream_file.read_bytes() == upstream_before
    assert stack.pid(active) == active_pid and process_alive(active_pid)
    idle = {"blue": "green", "green": "blue"}[active]
    assert stack.pid(idle) is None
    assert not stack.socket(idle).exists()
    link = stack.lib_dir / f"current-{idle}"
    assert (os.readlink(link) if link.is_symlink() else None) == idle_link_before
    # The old responder still serves through nginx.
    assert notification_lands(stack, f"after-failed-rollout.{time.time_ns()}")


def snapshot(stack):
    active = stack.upstream_slot()
    idle = {"blue": "green", "green": "blue"}[active]
    link = stack.lib_dir / f"current-{idle}"
    return (stack.upstream_file.read_bytes(), active, stack.pid(active),
            os.readlink(link) if link.is_symlink() else None)


def test_binary_that_exits_rolls_back(stack, workdir):
    broken = workdir / "broken-exits"
    broken.write_text("#!/bin/sh\necho 'broken build' >&2\nexit 1\n")
    broken.chmod(0o755)
    before = snapshot(stack)
    result = stack.rollout(broken, "--health-timeout", "10")
    assert "exited during its health check" in result.stdout
    assert_rolled_back(stack, result, *before)


def test_binary_whose_health_is_503_rolls_back(stack, workdir, binary):
    # Serves, but cannot reach Redis (the process environment wins over the env file):
    # /healthz answers 503, so nginx must never be pointed at it.
    unhealthy = workdir / "unhealthy-serves"
    unhealthy.write_text(f"#!/bin/sh\nSIWA_REDIS_URL=redis://127.0.0.1:1/0 exec {binary} \"$@\"\n")
    unhealthy.chmod(0o755)
    before = snapshot(stack)
    started = time.monotonic()
    result = stack.rollout(unhealthy, "--health-timeout", "3")
    assert time.monotonic() - started < 30
    assert "was not healthy within 3s" in result.stdout
    assert "Redis does not answer" in result.stdout
    assert_rolled_back(stack, result, *before)


def test_nginx_refusing_the_new_upstream_rolls_back(stack, workdir):
    # `nginx -t` fails (a command standing in for nginx that always fails -t): the old
    # upstream file is put back and the new slot is stopped.
    fake = workdir / "nginx-refuses"
    fake.write_text("#!/bin/sh\necho 'nginx: configuration test failed' >&2\nexit 1\n")
    fake.chmod(0o755)
    before = snapshot(stack)
    args = stack.rollout_args()
    args[args.index("--nginx") + 1] = str(fake)
    result = subprocess.run(args, capture_output=True, text=True, timeout=90)
    assert "nginx -t refused the new upstream file" in result.stdout
    assert_rolled_back(stack, result, *before)


def test_rollback_rolls_out_the_release_served_before(stack, workdir, binary):
    before = os.readlink(stack.lib_dir / "current-live")
    other = workdir / "release-to-roll-back"
    other.write_text(f"#!/bin/sh\n# another release\nexec {binary} \"$@\"\n")
    other.chmod(0o755)
    onto_other = stack.rollout(other)
    assert onto_other.returncode == 0, onto_other.stdout + onto_other.stderr
    other_release = os.readlink(stack.lib_dir / "current-live")
    assert other_release != before
    assert os.readlink(stack.lib_dir / "current-previous") == before

    args = stack.rollout_args()
    at = args.index("--binary")
    del args[at:at + 2]  # --rollback takes no --binary
    result = subprocess.run([*args, "--rollback"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"rolling back to {before}" in result.stdout
    assert os.readlink(stack.lib_dir / "current-live") == before
    assert os.readlink(stack.lib_dir / f"current-{stack.upstream_slot()}") == before
    assert os.readlink(stack.lib_dir / "current-previous") == other_release
    assert notification_lands(stack, f"000{int(time.time())}.rolledback")


def test_rollout_keeps_the_newest_five_releases(stack):
    # Six older releases (names sort by time: year 2000 is older than any real one).
    releases = stack.lib_dir / "releases"
    for day in range(1, 7):
        old = releases / f"2000010{day}T000000Z-{day:012d}"
        old.mkdir()
        (old / "siwa-endpoint").write_text("#!/bin/sh\nexit 1\n")
    before = sorted((path.name for path in releases.iterdir() if not path.name.startswith(".")), reverse=True)
    assert len(before) > 5

    result = stack.rollout()
    assert result.returncode == 0, result.stdout + result.stderr

    after = sorted((path.name for path in releases.iterdir() if not path.name.startswith(".")), reverse=True)
    in_use = {os.readlink(stack.lib_dir / f"current-{slot}").split("/", 1)[1]
              for slot in ("blue", "green") if (stack.lib_dir / f"current-{slot}").is_symlink()}
    # The newest five stay (the releases the slots point at are among them); the rest are removed.
    assert in_use <= set(before[:5]), (before, in_use)
    assert after == before[:5], (before, after)


def test_rollout_keeps_the_releases_the_slots_point_at_even_when_older_than_five(stack, workdir, binary):
    # Both slots end on releases older than five others: the one rolled out now (its
    # release directory already exists: the same binary keeps its first install time)
    # and the one the stopped slot still names (a wrapper, so a release of its own).
    releases = stack.lib_dir / "releases"
    wrapper = workdir / "same-binary-wrapped"
    wrapper.write_text(f"#!/bin/sh\n# a release of its own for the in-use test\nexec {binary} \"$@\"\n")
    wrapper.chmod(0o755)
    first = stack.rollout(wrapper)
    assert first.returncode == 0, first.stdout + first.stderr
    newer = [releases / f"2999010{day}T000000Z-{day:012d}" for day in range(1, 7)]  # newer than any real one
    try:
        for path in newer:
            path.mkdir()
            (path / "siwa-endpoint").write_text("#!/bin/sh\nexit 1\n")
        result = stack.rollout()
        assert result.returncode == 0, result.stdout + result.stderr

        in_use = {os.readlink(stack.lib_dir / f"current-{slot}").split("/", 1)[1] for slot in ("blue", "green")}
        assert len(in_use) == 2
        newest_five = sorted((path.name for path in newer), reverse=True)[:5]
        assert not in_use & set(newest_five)
        after = {path.name for path in releases.iterdir() if not path.name.startswith(".")}
        # The newest five stay, and so does every release a slot points at; nothing else.
        assert after == set(newest_five) | in_use, (sorted(after), sorted(in_use))
        for release in in_use:
            assert (releases / release / "siwa-endpoint").is_file()
    finally:
        for path in newer:
            shutil.rmtree(path, ignore_errors=True)


# ---- Run as root, the rollout writes nothing the service user can redirect -------------
# The service user (here `nobody`) owns the spools' and the sockets' directories, as the
# package's siwa-endpoint user owns /var/lib/siwa-endpoint and /run/siwa-endpoint. In each,
# it plants links to a root-only file (and to a path in a root-only directory) and FIFOs,
# under every name the rollout has used or uses for its lock and state.
SERVICE_USER = pwd.getpwnam("nobody")
PLANT_NAMES = ("rollout.lock", ".siwa-endpoint-rollout.lock", "rollout", "blue.pid", "green.pid", "blue.log",
               "green.log")


def root_only_file(workdir):
    private = workdir / "root-only"
    private.mkdir(mode=0o700, exist_ok=True)
    secret = private / "secret"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    return secret, private / "made-through-a-link"


def hand_to_service_user(*directories):
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, SERVICE_USER.pw_uid, SERVICE_USER.pw_gid)
        directory.chmod(0o755)


def plant(directory, kind, secret, absent):
    for number, name in enumerate(PLANT_NAMES):
        path = directory / name
        if path.is_symlink() or path.exists():
            path.unlink()
        if kind == "link":
            os.symlink(secret if number % 2 == 0 else absent, path)
        else:
            os.mkfifo(path, 0o666)
        os.lchown(path, SERVICE_USER.pw_uid, SERVICE_USER.pw_gid)


def unplant_and_give_back(*directories):
    for directory in directories:
        for name in PLANT_NAMES:
            path = directory / name
            if path.is_symlink() or (path.exists() and stat.S_ISFIFO(path.lstat().st_mode)):
                path.unlink()
        os.chown(directory, 0, 0)


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_installed_rollout_writes_nothing_through_what_the_service_user_planted(stack, workdir, kind):
    assert os.geteuid() == 0, "this test runs the rollout as root, as the package's postinst does"
    secret, absent = root_only_file(workdir)
    before = (secret.read_bytes(), secret.stat().st_mtime_ns, secret.stat().st_ino)
    hand_to_service_user(stack.spool_root, stack.socket_dir)
    try:
        for directory in (stack.spool_root, stack.socket_dir):
            plant(directory, kind, secret, absent)
        old_slot = stack.upstream_slot()
        started = time.monotonic()
        # A FIFO opened for writing blocks until a reader comes: bounded, a hang fails here.
        result = stack.rollout(stack.binary, "--installed", timeout=90)
        assert result.returncode == 0, result.stdout + result.stderr
        assert time.monotonic() - started < 90
        assert stack.upstream_slot() != old_slot
        assert (secret.read_bytes(), secret.stat().st_mtime_ns, secret.stat().st_ino) == before
        assert not absent.exists()
        for directory in (stack.spool_root, stack.socket_dir):
            for name in PLANT_NAMES:
                planted = (directory / name).lstat()
                assert stat.S_ISLNK(planted.st_mode) if kind == "link" else stat.S_ISFIFO(planted.st_mode)
        lock = stack.upstream_file.parent / ".siwa-endpoint-rollout.lock"
        assert stat.S_ISREG(lock.lstat().st_mode) and lock.lstat().st_uid == 0
    finally:
        unplant_and_give_back(stack.spool_root, stack.socket_dir)


def test_rollout_refuses_a_state_or_upstream_directory_another_user_can_write(stack, workdir):
    secret, absent = root_only_file(workdir)
    shared = workdir / "service-users-state"
    shared.mkdir(exist_ok=True)
    hand_to_service_user(shared)
    plant(shared, "fifo", secret, absent)
    upstream_before = stack.upstream_file.read_bytes()
    cases = [
        # Owned by the service user, and a directory the rollout would make under it.
        (["--state-dir", str(shared)], f"unsafe_directory: {shared} (--state-dir): {shared} belongs to user "
                                       f"{SERVICE_USER.pw_uid}"),
        (["--state-dir", str(shared / "state")], f"{shared} belongs to user {SERVICE_USER.pw_uid}"),
        # A FIFO the service user planted where the state directory goes.
        (["--state-dir", str(shared / "rollout")], f"{shared / 'rollout'} is not a directory"),
    ]
    try:
        for extra, message in cases:
            args = stack.rollout_args()
            at = args.index("--state-dir")
            args[at:at + 2] = extra
            result = subprocess.run(args, capture_output=True, text=True, timeout=30)
            assert result.returncode == 2, result.stdout + result.stderr
            assert message in result.stderr
            assert "rollout: unsafe_directory:" in result.stderr
            assert sorted(path.name for path in shared.iterdir()) == sorted(PLANT_NAMES)
        # The upstream file's directory writable by its group: the lock would go there.
        upstream_dir = stack.upstream_file.parent
        mode = upstream_dir.stat().st_mode
        upstream_dir.chmod(mode | 0o020)
        try:
            result = stack.rollout(timeout=30)
        finally:
            upstream_dir.chmod(mode)
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"unsafe_directory: {upstream_dir} (the directory of --upstream" in result.stderr
        assert "is writable by its group or by others" in result.stderr
        assert stack.upstream_file.read_bytes() == upstream_before
    finally:
        unplant_and_give_back(shared)
        shutil.rmtree(shared, ignore_errors=True)


# ---- scripts/install into a temp root ------------------------------------------------

def tree(root):
    """Every path under root: its type, mode, link target or content digest."""
    entries = {}
    for path in sorted(pathlib.Path(root).rglob("*")):
        info = path.lstat()
        relative = "/" + str(path.relative_to(root))
        if stat.S_ISLNK(info.st_mode):
            entries[relative] = ("link", os.readlink(path))
        elif stat.S_ISDIR(info.st_mode):
            entries[relative] = ("dir", oct(stat.S_IMODE(info.st_mode)))
        else:
            entries[relative] = ("file", oct(stat.S_IMODE(info.st_mode)), hashlib.sha256(path.read_bytes()).hexdigest())
    return entries


def install(root, binary):
    result = subprocess.run([str(INSTALL), "--root", str(root), "--binary", str(binary)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


DEBIAN_REDIS_CONF = "bind 127.0.0.1 -::1\nappendonly no\nappendfsync everysec\n"


@pytest.fixture
def install_root(workdir):
    root = workdir / f"install-root-{time.time_ns()}"
    (root / "etc" / "redis").mkdir(parents=True)
    (root / "etc" / "redis" / "redis.conf").write_text(DEBIAN_REDIS_CONF)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_install_lays_out_files_with_tight_modes_and_twice_is_the_same(install_root, binary):
    first = install(install_root, binary)
    layout = tree(install_root)
    second = install(install_root, binary)
    assert tree(install_root) == layout

    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:12]
    releases = [path for path in layout if path.startswith("/usr/local/lib/siwa-endpoint/releases/")
                and path.count("/") == 6]
    assert len(releases) == 1 and releases[0].endswith("-" + digest)
    release = releases[0].rsplit("/", 1)[1]
    expected = {
        "/etc/siwa-endpoint": ("dir", "0o750"),
        "/var/lib/siwa-endpoint": ("dir", "0o750"),
        "/usr/local/lib/siwa-endpoint": ("dir", "0o755"),
        "/usr/local/lib/siwa-endpoint/current-blue": ("link", f"releases/{release}"),
        "/usr/local/lib/siwa-endpoint/current-live": ("link", f"releases/{release}"),
        f"/usr/local/lib/siwa-endpoint/releases/{release}/siwa-endpoint":
            ("file", "0o755", hashlib.sha256(binary.read_bytes()).hexdigest()),
        "/etc/siwa-endpoint/env": ("file", "0o640", hashlib.sha256((DEPLOY / "env.example").read_bytes()).hexdigest()),
        "/etc/systemd/system/siwa-endpoint@.service":
            ("file", "0o644", hashlib.sha256((DEPLOY / "siwa-endpoint@.service").read_bytes()).hexdigest()),
        # The deliverer and reconcile, installed, not enabled; their secrets' directories their own.
        "/etc/siwa-endpoint/webhook-keys": ("dir", "0o700"),
        "/etc/siwa-endpoint/reconcile": ("dir", "0o700"),
        "/var/lib/siwa-endpoint-reconcile": ("dir", "0o700"),
        **{f"/etc/systemd/system/{unit}": ("file", "0o644", hashlib.sha256((DEPLOY / unit).read_bytes()).hexdigest())
           for unit in ("siwa-endpoint-deliver.service", "siwa-endpoint-reconcile.service",
                        "siwa-endpoint-reconcile.timer")},
        "/usr/local/share/siwa-endpoint/webhooks.json.example":
            ("file", "0o644", hashlib.sha256((DEPLOY / "webhooks.json.example").read_bytes()).hexdigest()),
        "/etc/redis/siwa-endpoint.conf":
            ("file", "0o644", hashlib.sha256((DEPLOY / "redis-siwa.conf").read_bytes()).hexdigest()),
        "/etc/redis/siwa-endpoint-users.conf":
            ("file", "0o644", hashlib.sha256((DEPLOY / "redis-siwa-users.conf").read_bytes()).hexdigest()),
        "/etc/nginx/conf.d/siwa-endpoint-http.conf":
            ("file", "0o644", hashlib.sha256((REPO / "nginx/siwa-endpoint-http.conf").read_bytes()).hexdigest()),
        "/etc/nginx/sites-available/siwa-endpoint.conf":
            ("file", "0o644", hashlib.sha256((REPO / "nginx/siwa-endpoint.conf").read_bytes()).hexdigest()),
    }
    for path, entry in expected.items():
        assert layout.get(path) == entry, path
    assert "/usr/local/lib/siwa-endpoint/current-green" not in layout

    upstream = (install_root / "etc/nginx/siwa-endpoint-upstream.conf").read_text()
    assert "server unix:/run/siwa-endpoint/blue.sock;" in upstream
    assert "fcgi.sock" not in upstream
    redis_conf = (install_root / "etc/redis/redis.conf").read_text()
    assert redis_conf.startswith(DEBIAN_REDIS_CONF)
    assert redis_conf.splitlines().count("include /etc/redis/siwa-endpoint.conf") == 1
    assert redis_conf.rstrip().endswith("include /etc/redis/siwa-endpoint.conf")

    # Not configured: nothing enabled, nothing started, and the next steps are printed.
    assert "/etc/nginx/sites-enabled/siwa-endpoint.conf" not in layout
    for result in (first, second):
        assert "nothing started yet" in result.stdout
        assert "set SIWA_CLIENT_IDS" in result.stdout
        assert "systemctl" not in result.stdout
        for user in ("siwa-endpoint", "siwa-endpoint-deliver", "siwa-endpoint-reconcile"):
            assert f"would create system user {user} (nologin, no home) if missing" in result.stdout
    assert "upgrade it with scripts/rollout" in second.stdout


def test_install_keeps_the_operators_files_and_starts_once_configured(install_root, binary, rsa_cert, ecdsa_cert):
    install(install_root, binary)
    env = install_root / "etc/siwa-endpoint/env"
    env.write_text("SIWA_CLIENT_IDS=com.example.app\nSIWA_REDIS_URL=redis://127.0.0.1:6380/0\n")
    env.chmod(0o644)
    site = install_root / "etc/nginx/sites-available/siwa-endpoint.conf"
    site.write_text(site.read_text().replace("siwa.example.com", "siwa.test.example"))
    upstream = install_root / "etc/nginx/siwa-endpoint-upstream.conf"
    upstream.write_text(upstream.read_text().replace("blue.sock", "green.sock"))  # as a rollout leaves it
    certificate, key = rsa_cert
    (install_root / "etc/ssl/siwa-endpoint").mkdir(parents=True)
    shutil.copy(certificate, install_root / "etc/ssl/siwa-endpoint/fullchain.pem")
    shutil.copy(key, install_root / "etc/ssl/siwa-endpoint/privkey.pem")
    shutil.copy(ecdsa_cert[0], install_root / "etc/ssl/siwa-endpoint/ecdsa-fullchain.pem")
    shutil.copy(ecdsa_cert[1], install_root / "etc/ssl/siwa-endpoint/ecdsa-privkey.pem")
    # A slot is deployed: the binary is not even looked at (upgrades are rollouts).
    result = install(install_root, install_root / "no-such-binary")
    assert env.read_text() == "SIWA_CLIENT_IDS=com.example.app\nSIWA_REDIS_URL=redis://127.0.0.1:6380/0\n"
    assert stat.S_IMODE(env.stat().st_mode) == 0o640
    assert "siwa.test.example" in site.read_text()
    assert "green.sock" in upstream.read_text()
    assert (install_root / "etc/nginx/sites-available/siwa-endpoint.conf.dist").read_bytes() == \
        (REPO / "nginx/siwa-endpoint.conf").read_bytes()
    assert "kept /etc/nginx/sites-available/siwa-endpoint.conf" in result.stdout
    assert len(list((install_root / "usr/local/lib/siwa-endpoint/releases").iterdir())) == 1

    link = install_root / "etc/nginx/sites-enabled/siwa-endpoint.conf"
    assert os.readlink(link) == "/etc/nginx/sites-available/siwa-endpoint.conf"
    assert "nothing started yet" not in result.stdout
    assert "would run: systemctl enable --now siwa-endpoint@green" in result.stdout
    assert "would run: systemctl reload nginx" in result.stdout


def test_install_run_again_on_the_nodes_layout_starts_no_slot(install_root, binary, rsa_cert, ecdsa_cert):
    install(install_root, binary)
    (install_root / "etc/siwa-endpoint/env").write_text("SIWA_CLIENT_IDS=com.example.app\n")
    site = install_root / "etc/nginx/sites-available/siwa-endpoint.conf"
    site.write_text(site.read_text().replace("siwa.example.com", "siwa.test.example"))
    certificate, key = rsa_cert
    (install_root / "etc/ssl/siwa-endpoint").mkdir(parents=True)
    shutil.copy(certificate, install_root / "etc/ssl/siwa-endpoint/fullchain.pem")
    shutil.copy(key, install_root / "etc/ssl/siwa-endpoint/privkey.pem")
    shutil.copy(ecdsa_cert[0], install_root / "etc/ssl/siwa-endpoint/ecdsa-fullchain.pem")
    shutil.copy(ecdsa_cert[1], install_root / "etc/ssl/siwa-endpoint/ecdsa-privkey.pem")
    # The nodes layout of docs/deployment.md: the nodes' upstream file in place of the slots'.
    shutil.copy(REPO / "nginx/siwa-endpoint-upstream-nodes.conf", install_root / "etc/nginx/siwa-endpoint-upstream.conf")
    result = install(install_root, binary)
    assert "lists several nodes: no slot started" in result.stdout
    assert "siwa-endpoint@blue" not in result.stdout and "siwa-endpoint@green" not in result.stdout
    assert "would run: systemctl reload nginx" in result.stdout


def test_env_example_names_every_setting_and_is_valid_uncommented(binary, workdir):
    help_text = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True, timeout=30,
                               check=True).stdout
    settings = sorted(set(re.findall(r"^\s+(SIWA_[A-Z_]+) \(default", help_text, flags=re.M)))
    example = (DEPLOY / "env.example").read_text()
    named = sorted(set(re.findall(r"^#(SIWA_[A-Z_]+)=", example, flags=re.M)))
    assert settings and named == settings

    # Every line uncommented is a valid configuration (paths moved to a temp dir), but for
    # the alternatives to the plain-TCP Sentinel set-up the example describes: the TLS files
    # (they need rediss:// and real files) and the cluster's seeds (a cluster excludes
    # Sentinel). Their own checks are the Swift TLS and cluster settings tests.
    alternatives = ("#SIWA_REDIS_TLS_CA_FILE=", "#SIWA_REDIS_TLS_CERT_FILE=", "#SIWA_REDIS_TLS_KEY_FILE=",
                    "#SIWA_REDIS_TLS_SERVER_NAME=", "#SIWA_REDIS_CLUSTER_NODES=")
    uncommented = workdir / "env-uncommented"
    uncommented.write_text("".join(line[1:] + "\n" for line in example.splitlines()
                                   if line.startswith("#SIWA_") and not line.startswith(alternatives)))
    # --check also checks this machine (the socket's directory must exist, as systemd's
    # RuntimeDirectory makes it): the socket goes to the temp dir too. It asks the sentinels
    # as serve does: the example's addresses are replaced by loopback ports nobody listens
    # on (unreachable sentinels are an outage, not a refusal), so no traffic leaves the host.
    overrides = {"SIWA_JWKS_CACHE": str(workdir / "jwks.json"), "SIWA_SPOOL_DIR": str(workdir / "spool"),
                 "SIWA_FCGI_SOCKET": str(workdir / "fcgi.sock"), "SIWA_FCGI_SOCKET_GROUP": "",
                 "SIWA_REDIS_SENTINELS": "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}
    checked = subprocess.run([str(binary), "serve", "--env-file", str(uncommented), "--check"],
                             capture_output=True, text=True, timeout=30, env={"PATH": os.environ["PATH"], **overrides})
    assert checked.returncode == 0, checked.stderr
    valid = json.loads(checked.stdout)
    assert (valid["event"], valid["level"], valid["checked_as"]) == \
        ("configuration_valid", "info", pwd.getpwuid(os.geteuid()).pw_name)

    # As shipped (all commented out) it is refused until SIWA_CLIENT_IDS is set.
    refused = subprocess.run([str(binary), "serve", "--env-file", str(DEPLOY / "env.example"), "--check"],
                             capture_output=True, text=True, timeout=30, env={"PATH": os.environ["PATH"]})
    assert refused.returncode == 2 and "SIWA_CLIENT_IDS" in refused.stderr


def test_systemd_unit_passes_systemd_analyze_verify(workdir, binary):
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze is missing (scripts/install-deps installs the systemd package)"
    unit = (DEPLOY / "siwa-endpoint@.service").read_text()
    # verify also checks that ExecStart's binary exists: the installed path is
    # replaced by the binary under test, nothing else changes.
    installed = "/usr/local/lib/siwa-endpoint/current-%i/siwa-endpoint"
    # ExecStart only: a bad setting is refused by serve itself, as the main process, so
    # RestartPreventExitStatus=2 applies (an ExecStartPre check restart-looped).
    assert unit.count(installed) == 1
    assert not [line for line in unit.splitlines() if line.startswith("ExecStartPre=")]
    directory = workdir / "unit"
    directory.mkdir(exist_ok=True)
    (directory / "siwa-endpoint@blue.service").write_text(unit.replace(installed, str(binary)))
    result = subprocess.run([analyze, "verify", str(directory / "siwa-endpoint@blue.service")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""
    for setting in ("Environment=SIWA_FCGI_SOCKET=/run/siwa-endpoint/%i.sock",
                    "Environment=SIWA_SPOOL_DIR=/var/lib/siwa-endpoint/spool-%i", "LimitNOFILE=1024",
                    "RuntimeDirectoryPreserve=yes", "KillSignal=SIGTERM", "TimeoutStopSec=20"):
        assert setting in unit.splitlines()


def test_reconcile_units_pass_systemd_analyze_verify(workdir, binary):
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze is missing (scripts/install-deps installs the systemd package)"
    service = (DEPLOY / "siwa-endpoint-reconcile.service").read_text()
    timer = (DEPLOY / "siwa-endpoint-reconcile.timer").read_text()
    installed = "/usr/local/lib/siwa-endpoint/current-live/siwa-endpoint"
    assert service.count(installed) == 1
    directory = workdir / "reconcile-units"
    directory.mkdir(exist_ok=True)
    (directory / "siwa-endpoint-reconcile.service").write_text(service.replace(installed, str(binary)))
    (directory / "siwa-endpoint-reconcile.timer").write_text(timer)
    result = subprocess.run([analyze, "verify", str(directory / "siwa-endpoint-reconcile.timer"),
                             str(directory / "siwa-endpoint-reconcile.service")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""
    assert "OnCalendar=daily" in timer.splitlines()
    assert "Type=oneshot" in service.splitlines()
    exec_start = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    assert exec_start.split()[1:4] == ["reconcile", "--env-file", "/etc/siwa-endpoint/env"]


def offline_exposure(analyze, unit_path):
    result = subprocess.run([analyze, "security", "--offline=true", "--no-pager", str(unit_path)],
                            capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found, result.stdout + result.stderr
    return float(found.group(1)), result.stdout


def test_every_shipped_service_sets_no_core_dump_and_reconcile_is_hardened_like_serve(workdir, binary):
    # A core dump holds what the process held (tokens, addresses, the client secret):
    # every service the package ships sets LimitCORE=0. Reconcile holds the most (every
    # user's refresh token, the .p8 key's secret), so it gets serve's sandbox too, as
    # systemd-analyze scores it offline from the unit file.
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None
    directory = workdir / "hardening-units"
    directory.mkdir(exist_ok=True)
    units = {
        "siwa-endpoint@blue.service": ("siwa-endpoint@.service",
                                       "/usr/local/lib/siwa-endpoint/current-%i/siwa-endpoint"),
        "siwa-endpoint-reconcile.service": ("siwa-endpoint-reconcile.service",
                                            "/usr/local/lib/siwa-endpoint/current-live/siwa-endpoint"),
        # The webhook deliverer holds the signing keys: reconcile's sandbox, line for line
        # (deploy-tests/test_deliver_unit.py).
        "siwa-endpoint-deliver.service": ("siwa-endpoint-deliver.service",
                                          "/usr/local/lib/siwa-endpoint/current-live/siwa-endpoint"),
    }
    exposures = {}
    for name, (shipped, installed) in units.items():
        text = (DEPLOY / shipped).read_text()
        assert "LimitCORE=0" in text.splitlines(), shipped
        (directory / name).write_text(text.replace(installed, str(binary)))
        exposures[name], report = offline_exposure(analyze, directory / name)
        print(f"{name}: systemd-analyze security --offline exposure {exposures[name]}")
    serve, reconcile = exposures["siwa-endpoint@blue.service"], exposures["siwa-endpoint-reconcile.service"]
    assert serve <= 2.0 and reconcile <= 2.0 and exposures["siwa-endpoint-deliver.service"] <= 2.0, exposures
    reconcile_lines = (DEPLOY / "siwa-endpoint-reconcile.service").read_text().splitlines()
    for directive in ("CapabilityBoundingSet=", "RestrictSUIDSGID=yes", "ProtectProc=invisible",
                      "MemoryDenyWriteExecute=yes", "SystemCallFilter=@system-service",
                      "SystemCallFilter=~@privileged @resources", "SystemCallArchitectures=native"):
        assert directive in reconcile_lines, directive
    shipped_services = sorted(path.name for path in DEPLOY.glob("*.service"))
    assert shipped_services == sorted(shipped for shipped, _ in units.values())
