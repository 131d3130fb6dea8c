"""The shipped Redis durability setting (deploy/redis-siwa.conf), loaded by a real
redis-server the way scripts/install does it (included last), turns AOF on with
appendfsync everysec, and Redis then writes an append-only file."""

import hashlib
import pathlib
import re
import shutil
import subprocess

from deploy_harness import RedisServer, free_port
from stack import wait_until

SHIPPED = pathlib.Path(__file__).resolve().parents[1] / "deploy" / "redis-siwa.conf"


def test_shipped_redis_setting_turns_aof_on_with_everysec(workdir):
    directory = workdir / "redis-conf"
    directory.mkdir()
    port = free_port()
    # Debian's default first (appendonly no), then the shipped file, as install arranges it.
    config = directory / "redis.conf"
    config.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {directory}\nsave \"\"\nappendonly no\nappendfsync no\n"
        f"include {SHIPPED}\n")
    server = RedisServer(directory, aof=None, port=port, config=config)

    def cli(*args):
        done = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=10)
        return done.stdout.strip()

    try:
        assert wait_until(lambda: cli("PING") == "PONG", timeout=10), "redis-server did not start"
        assert cli("CONFIG", "GET", "appendonly").splitlines() == ["appendonly", "yes"]
        assert cli("CONFIG", "GET", "appendfsync").splitlines() == ["appendfsync", "everysec"]
        assert cli("SET", "siwa:probe", "1") == "OK"
        assert wait_until(lambda: any(directory.rglob("*.aof")), timeout=10), "no append-only file written"
    finally:
        server.stop()


USERS = SHIPPED.parent / "redis-siwa-users.conf"


def test_shipped_redis_users_load_by_include_and_keep_the_default_password(workdir):
    """deploy/redis-siwa-users.conf included by a real redis-server, as docs/deployment.md says:
    as shipped the five users exist and none can log in; with each password's SHA-256 put in
    by the documented sed, each logs in; the default user keeps requirepass (an aclfile would
    drop it); the deliverer's, a reader's and the deletion worker's XADD to the streams are
    refused (each user's whole behaviour: Tests/SIWAServerTests/Webhooks/RedisUsersTests.swift)."""
    directory = workdir / "redis-users"
    directory.mkdir()
    port = free_port()
    users_file = directory / "siwa-endpoint-users.conf"
    shutil.copy(USERS, users_file)
    config = directory / "redis.conf"
    config.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {directory}\nsave \"\"\nrequirepass admin-fixture-password\n"
        f"include {users_file}\n")

    def cli(*args, user=None, password="admin-fixture-password"):
        auth = (["--user", user] if user else []) + (["-a", password] if password is not None else [])
        done = subprocess.run(["redis-cli", "--no-auth-warning", "-p", str(port), *auth, *args],
                              capture_output=True, text=True, timeout=10)
        return (done.stdout + done.stderr).strip()

    def run_server():
        server = RedisServer(directory, aof=None, port=port, config=config)
        assert wait_until(lambda: cli("PING") == "PONG", timeout=10), "redis-server did not start"
        return server

    def stop(server):
        server.stop()

    names = ["siwa-deletions", "siwa-deliver", "siwa-operator", "siwa-reader", "siwa-serve"]
    server = run_server()
    try:
        assert cli("PING", password=None).startswith("NOAUTH")
        assert cli("ACL", "USERS").splitlines() == ["default", *names]
        for user in names:
            assert "nopass" not in cli("ACL", "GETUSER", user)
            assert "WRONGPASS" in cli("PING", user=user, password=f"{user}-fixture-password")
    finally:
        stop(server)
    # The documented step: sed -i "s/^user NAME on resetpass /&#HASH /" FILE, for each user.
    for user in names:
        digest = hashlib.sha256(f"{user}-fixture-password".encode()).hexdigest()
        subprocess.run(["sed", "-i", f"s/^user {user} on resetpass /&#{digest} /", str(users_file)], check=True)
    server = run_server()
    try:
        assert cli("PING", password=None).startswith("NOAUTH")
        for user in names:
            assert cli("PING", user=user, password=f"{user}-fixture-password") == "PONG", user
        added = cli("XADD", "siwa:events", "*", "type", "account-deleted", user="siwa-serve",
                    password="siwa-serve-fixture-password")
        assert re.fullmatch(r"[0-9]+-[0-9]+", added), added
        for user in ("siwa-deliver", "siwa-reader", "siwa-deletions"):
            for stream in ("siwa:events", "siwa:deletions"):
                refused = cli("XADD", stream, "*", "type", "account-deleted", user=user,
                              password=f"{user}-fixture-password")
                assert refused.startswith("NOPERM"), (user, stream, refused)
        assert cli("XLEN", "siwa:events") == "1"
        assert cli("XLEN", "siwa:deletions") == "0"
    finally:
        stop(server)
