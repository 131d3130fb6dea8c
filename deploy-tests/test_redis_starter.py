"""deploy_harness.RedisServer, the deployment tests' one way to start redis-server: it
answers when the constructor returns, runs with the AOF asked for, and a server that
cannot start is named, also when another server answers on its port."""

import pytest

from deploy_harness import RedisServer


def test_a_server_answers_with_the_aof_asked_for(tmp_path):
    server = RedisServer(tmp_path / "redis", aof=False)
    try:
        assert server.cli("PING").strip() == "PONG"
        assert server.cli("CONFIG", "GET", "appendonly").split() == ["appendonly", "no"]
        assert server.cli("CONFIG", "GET", "dir").split()[1] == str(tmp_path / "redis")
    finally:
        server.stop()


def test_another_server_on_the_port_does_not_pass_for_it(tmp_path):
    squatter = RedisServer(tmp_path / "squatter", aof=False)
    try:
        with pytest.raises(RuntimeError, match="(?s)redis-server exited:.*Address already in use"):
            RedisServer(tmp_path / "ours", aof=False, port=squatter.port)
        assert squatter.process.poll() is None
    finally:
        squatter.stop()
