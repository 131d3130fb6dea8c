"""The shipped Redis durability setting (deploy/redis-siwa.conf), loaded by a real
redis-server the way scripts/install does it (included last), turns AOF on with
appendfsync everysec, and Redis then writes an append-only file."""

import pathlib
import subprocess

from deploy_harness import free_port
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
    server = subprocess.Popen(["redis-server", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

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
        server.terminate()
        server.wait(timeout=10)
