"""Free loopback ports leave room for a Redis cluster node's bus port (its port + 10000):
neither the Python harness nor scripts/lib/local-stack.sh hands out a port above 55535.
The kernel picks from 32768...60999 here, so about a fifth of its picks are too high."""

from deploy_harness import HIGHEST_FREE_PORT, free_port, local_stack


def test_harness_free_port_leaves_room_for_a_bus_port():
    ports = [free_port() for _ in range(300)]
    assert HIGHEST_FREE_PORT == 55535
    assert max(ports) <= 55535, [port for port in ports if port > 55535]


def test_local_stack_free_port_leaves_room_for_a_bus_port():
    script = "for i in $(seq 60); do stack_free_port; done"
    ports = [int(line) for line in local_stack("eval", script).split()]
    assert len(ports) == 60
    assert max(ports) <= 55535, [port for port in ports if port > 55535]
