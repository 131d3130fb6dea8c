"""scripts/rollout against real parts: the siwa-endpoint binary, redis-server, nginx
rendered from the shipped files (TLS on loopback), with --manager direct; and
scripts/install into a temp root, with the shipped systemd unit checked by
systemd-analyze when it is installed."""

import concurrent.futures
import hashlib
import os
import pathlib
import shutil
import stat
import subprocess
import threading
import time

import pytest

from deploy_harness import REPO
from rollout_stack import INSTALL, RolloutStack, find_binary, process_alive, wait_for

DEPLOY = REPO / "deploy"


@pytest.fixture(scope="module")
def binary():
    return find_binary()


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


def sign_many(stack, subs):
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(stack.sign, subs))


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

    count, threads, seconds = 300, 3, 10.0
    subs = [f"000{index:03d}.rollout{int(time.time())}.{index:04d}" for index in range(count)]
    bodies = sign_many(stack, subs)
    answers = [None] * count
    answered_at = [None] * count
    errors = []

    def client(offset):
        # Each thread sends every threads-th notification, paced to spread the
        # stream over about `seconds`; one fresh TLS connection per notification.
        start = time.monotonic()
        for number, index in enumerate(range(offset, count, threads)):
            delay = start + number * seconds * threads / count - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                answers[index] = stack.post(bodies[index])
                answered_at[index] = time.monotonic()
            except Exception as error:  # a dropped connection is a failure too
                errors.append(f"{subs[index]}: {error!r}")

    workers = [threading.Thread(target=client, args=(offset,)) for offset in range(threads)]
    for worker in workers:
        worker.start()
    time.sleep(2.5)  # the rollout starts while notifications flow, and ends before they stop
    rollout_started = time.monotonic()
    result = stack.rollout(timeout=90)
    rollout_finished = time.monotonic()
    for worker in workers:
        worker.join(timeout=60)
    assert not any(worker.is_alive() for worker in workers)

    assert result.returncode == 0, result.stdout + result.stderr
    assert errors == []
    non_2xx = [(subs[i], answer) for i, answer in enumerate(answers) if answer is None or not 200 <= answer[0] < 300]
    assert non_2xx == []
    assert [answer[1] for answer in answers] == [{"status": "applied"}] * count

    # The stream really overlapped the switch: both slots answered notifications.
    def served(slot):
        return sum(1 for line in stack.log_lines(slot) if line.get("path") == "/apple/notifications")

    assert served(old_slot) > 0 and served(new_slot) > 0, (served(old_slot), served(new_slot))
    assert served(old_slot) + served(new_slot) == count
    assert any(moment < rollout_started for moment in answered_at)
    assert any(moment > rollout_finished for moment in answered_at)

    # Every notification answered 2xx is in Redis.
    missing = [sub for sub in subs if not stack.user_exists(sub)]
    assert missing == []
    assert stack.stream_length() - stream_before == count

    # The old slot's process has exited; nginx names the new socket; the new slot runs.
    assert wait_for(lambda: not process_alive(old_pid), 5)
    assert not (stack.state_dir / f"{old_slot}.pid").exists()
    assert not stack.socket(old_slot).exists()
    assert stack.upstream_slot() == new_slot
    assert process_alive(stack.pid(new_slot))
    assert "spool depth of slot %s: 0" % old_slot in result.stdout
    assert os.readlink(stack.lib_dir / f"current-{new_slot}").startswith("releases/")


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
