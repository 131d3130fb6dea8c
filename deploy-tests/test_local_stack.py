"""scripts/lib/local-stack.sh's process helpers. Its record of the processes it started: a
process the caller stopped on purpose (stack_forget_pid, which run-local --ha, bench-e2e
and stack_stop_endpoint use) leaves the record, so stack_stop_all never signals its number
again, and everything else stays in it, names and order kept. The one way the scripts
start redis-server (stack_start_redis): answering when it returns, the caller's options
over its own, a configuration file read first, a server that cannot start named (also
when another server answers on its port)."""

import subprocess

from deploy_harness import LOCAL_STACK, local_stack


def test_stack_forget_pid_drops_only_that_process_and_stop_all_stops_the_rest():
    script = r"""
stack_start first /dev/null sleep 60
stack_start second /dev/null sleep 60
stack_start third /dev/null sleep 60
second=$(stack_pid second)
kill -KILL "$second"
wait "$second" 2>/dev/null || true
stack_forget_pid "$second"
echo "pids=${STACK_PIDS[*]}"
echo "names=${STACK_NAMES[*]}"
echo "expected=$(stack_pid first) $(stack_pid third)"
kept=("${STACK_PIDS[@]}")
stack_stop_all
for pid in "${kept[@]}"; do stack_alive "$pid" && echo "alive=$pid"; done
echo "after=${#STACK_PIDS[@]}"
stack_forget_pid 12345
echo "empty=${#STACK_PIDS[@]}"
"""
    lines = dict(line.split("=", 1) for line in local_stack("eval", script).splitlines())
    assert lines["names"] == "first third"
    assert lines["pids"] == lines["expected"]
    assert len(lines["pids"].split()) == 2
    assert "alive" not in lines
    assert lines["after"] == "0"
    # Forgetting in an empty record is no error under `set -u`.
    assert lines["empty"] == "0"


def test_stack_start_redis_answers_when_it_returns_with_the_callers_options_and_file(tmp_path):
    config = tmp_path / "extra.conf"
    config.write_text("maxmemory-policy noeviction\nappendonly no\n")
    script = f"""
port=$(stack_free_port)
stack_start_redis store "$port" {tmp_path}/redis {tmp_path}/redis.log {config} --save "" --appendonly yes
echo "ping=$(redis-cli -p "$port" PING)"
echo "appendonly=$(redis-cli -p "$port" CONFIG GET appendonly | tail -n 1)"
echo "policy=$(redis-cli -p "$port" CONFIG GET maxmemory-policy | tail -n 1)"
echo "dir=$(redis-cli -p "$port" CONFIG GET dir | tail -n 1)"
echo "bind=$(redis-cli -p "$port" CONFIG GET bind | tail -n 1)"
echo "names=${{STACK_NAMES[*]}}"
pid=$(stack_pid store)
stack_stop_all
stack_alive "$pid" && echo "alive=$pid"
echo "done=1"
"""
    lines = dict(line.split("=", 1) for line in local_stack("eval", script).splitlines())
    # No wait of the caller's own: PING answers as soon as the function returns.
    assert lines["ping"] == "PONG"
    # The caller's option wins over the file's.
    assert lines["appendonly"] == "yes"
    assert lines["policy"] == "noeviction"
    assert lines["dir"] == str(tmp_path / "redis")
    assert lines["bind"] == "127.0.0.1"
    assert lines["names"] == "store"
    assert "alive" not in lines
    assert "Ready to accept connections" in (tmp_path / "redis.log").read_text()


def test_stack_start_redis_names_a_server_that_exits_at_start(tmp_path):
    script = ('set -euo pipefail; source "$0"; trap stack_stop_all EXIT; '
              'stack_start_redis broken "$(stack_free_port)" "$1/redis" "$1/redis.log" --no-such-option yes; '
              'echo started')
    result = subprocess.run(["bash", "-c", script, str(LOCAL_STACK), str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "redis-server broken exited at start:" in result.stderr
    assert "no-such-option" in result.stderr


def test_stack_start_redis_is_not_fooled_by_another_server_on_its_port(tmp_path):
    # Another redis-server already holds the port: ours exits, and that server's PONG does not count.
    script = ('set -euo pipefail; source "$0"; trap stack_stop_all EXIT; port=$(stack_free_port); '
              'stack_start_redis squatter "$port" "$1/squatter" "$1/squatter.log" --save ""; '
              'stack_start_redis ours "$port" "$1/ours" "$1/ours.log" --save ""; echo started')
    result = subprocess.run(["bash", "-c", script, str(LOCAL_STACK), str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "redis-server ours exited at start:" in result.stderr
    assert "Address already in use" in result.stderr
