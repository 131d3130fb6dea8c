"""scripts/lib/local-stack.sh's record of the processes it started: a process the caller
stopped on purpose (stack_forget_pid, which run-local --ha, bench-e2e and
stack_stop_endpoint use) leaves the record, so stack_stop_all never signals its number
again, and everything else stays in it, names and order kept."""

from deploy_harness import local_stack


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
