"""Free loopback ports leave room for a Redis cluster node's bus port (its port + 10000):
neither the Python harness nor scripts/lib/local-stack.sh hands out a port above 55535.
The kernel picks from 32768...60999 here, so about a fifth of its picks are too high.
Neither hands out the same port twice in one run: the kernel offers a port again as soon
as the probe that found it is closed, so a few hundred picks repeat one almost surely
(two servers rendered on one port made nginx warn "conflicting server name")."""

import os
import re
import subprocess

from deploy_harness import HIGHEST_FREE_PORT, LOCAL_STACK, free_port, local_stack


def test_harness_free_port_leaves_room_for_a_bus_port_and_never_repeats():
    ports = [free_port() for _ in range(2000)]
    assert HIGHEST_FREE_PORT == 55535
    assert max(ports) <= 55535, [port for port in ports if port > 55535]
    assert len(set(ports)) == len(ports), sorted(port for port in set(ports) if ports.count(port) > 1)


def test_local_stack_free_port_leaves_room_for_a_bus_port_and_never_repeats():
    script = ('for i in $(seq 60); do stack_free_port; done; echo "given=$STACK_PORTS_GIVEN"; '
              "stack_stop_all")
    output = local_stack("eval", script)
    ports = [int(line) for line in output.split() if line.isdigit()]
    assert len(ports) == 60
    assert max(ports) <= 55535, [port for port in ports if port > 55535]
    assert len(set(ports)) == len(ports), sorted(port for port in set(ports) if ports.count(port) > 1)
    # The record of ports handed out goes with the stack.
    given = re.search(r"^given=(.+)$", output, re.MULTILINE).group(1)
    assert not os.path.exists(given)


def test_local_stack_free_port_never_hands_out_a_port_it_handed_out_before(tmp_path, monkeypatch):
    # Every port at or below 55535 already handed out in this shell: none is left to give.
    given = tmp_path / "ports-given"
    given.write_text("".join(f"{port}\n" for port in range(1, 55536)))
    monkeypatch.setenv("STACK_PORTS_GIVEN", str(given))
    result = subprocess.run(["bash", "-c", 'source "$0"; stack_free_port', str(LOCAL_STACK)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0, result.stdout
    assert result.stdout == ""
    assert "no free loopback port at or below 55535 not handed out before" in result.stderr
