"""Several responder nodes behind the shipped nginx site (TLS on loopback): two real
`siwa-endpoint serve` processes, each with its own socket and spool, one Redis, the
upstream rendered from nginx/siwa-endpoint-upstream-nodes.conf. One node is SIGKILLed
mid-load and restarted; the test client stands in for Apple and retries any non-200."""

import concurrent.futures
import http.client
import json
import ssl
import time

import pytest

from deploy_harness import NGINX_DIR
from fault_under_load import PacedLoad
from stack import (CLIENT_ID, KEY_ID, JWKSNginxStack, RedisServer, ServeProcess, build_binary, find_binary, run,
                   wait_until)

NODES_FILE = NGINX_DIR / "siwa-endpoint-upstream-nodes.conf"
NODE_SOCKETS = ["unix:/run/siwa-endpoint/node-1.sock", "unix:/run/siwa-endpoint/node-2.sock"]


class NodesStack:
    def __init__(self, directory, binary, ca_cert, cert, key):
        self.dir = directory
        self.binary = binary
        self.ca_cert = ca_cert
        self.redis = self.nginx = None
        self.nodes = {}
        kit = directory / "kit"
        run([str(binary), "keygen", "--out", str(kit), "--kid", KEY_ID])
        self.signing_key = kit / "test-signing-key.pem"
        self.redis = RedisServer(directory / "redis")
        self.nginx = JWKSNginxStack(directory / "nginx", cert, key, kit / "test-jwks.json")
        # The shipped N-node upstream, with this machine's socket paths.
        upstream = NODES_FILE.read_text()
        for number, placeholder in enumerate(NODE_SOCKETS, start=1):
            assert upstream.count(placeholder) == 1, f"{NODES_FILE.name} lost {placeholder}"
            upstream = upstream.replace(placeholder, f"unix:{self.socket(number)}")
        (self.nginx.conf_dir / "siwa-endpoint-upstream.conf").write_text(upstream)
        self.nginx.start()
        for number in (1, 2):
            self.start_node(number)

    def socket(self, number):
        return self.dir / f"node-{number}.sock"

    def start_node(self, number):
        node_dir = self.dir / f"node-{number}"
        node_dir.mkdir(exist_ok=True)
        settings = {
            "SIWA_CLIENT_IDS": CLIENT_ID,
            "SIWA_JWKS_URL": self.nginx.jwks_url,
            "SIWA_JWKS_CA_FILE": str(self.ca_cert),
            "SIWA_JWKS_CACHE": str(node_dir / "jwks-cache.json"),
            "SIWA_REDIS_URL": self.redis.url,
            "SIWA_REDIS_TIMEOUT_MS": "500",
            "SIWA_FCGI_SOCKET": str(self.socket(number)),
            "SIWA_SPOOL_DIR": str(node_dir / "spool"),
            "SIWA_WORKERS": "3",
        }
        env_file = node_dir / "serve.env"
        env_file.write_text("".join(f"{name}={value}\n" for name, value in settings.items()))
        self.nodes[number] = ServeProcess(self.binary, env_file, self.socket(number), node_dir / "serve.log")

    def kill_node(self, number):
        process = self.nodes[number].process
        process.kill()
        process.wait(timeout=10)

    def sign(self, sub):
        return run([str(self.binary), "sign", "--key", str(self.signing_key), "--kid", KEY_ID, "--type",
                    "consent-revoked", "--sub", sub, "--client-id", CLIENT_ID]).stdout.strip().encode()

    def post(self, body):
        """(status, JSON body or None); a dropped connection is (None, None)."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        connection = http.client.HTTPSConnection("localhost", self.nginx.https_port, context=context, timeout=15)
        try:
            connection.request("POST", "/apple/notifications", body=body,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            payload = response.read()
            try:
                return response.status, json.loads(payload) if payload else None
            except ValueError:
                return response.status, None  # nginx's own error page
        except OSError:
            return None, None
        finally:
            connection.close()

    def stop(self):
        if self.nginx is not None:
            self.nginx.stop()
        for node in self.nodes.values():
            node.stop()
        if self.redis is not None:
            self.redis.stop()


@pytest.fixture(scope="module")
def nodes_stack(workdir, pki, rsa_cert):
    binary = find_binary() or build_binary()
    stack = NodesStack(workdir / "nodes", binary, pki.ca_cert, *rsa_cert)
    yield stack
    stack.stop()


def test_a_node_killed_mid_load_loses_nothing_and_applies_each_notification_once(nodes_stack):
    stack = nodes_stack
    count, threads, seconds = 240, 4, 6.0  # under the site's 50/s rate limit
    run_id = int(time.time())
    subs = [f"000{index:03d}.nodes{run_id}.{index:04d}" for index in range(count)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        bodies = list(pool.map(stack.sign, subs))

    def kill_and_restart_node_1(load):
        stack.kill_node(1)
        killed_after = load.answered()
        assert wait_until(lambda: load.answered() >= killed_after + 20, timeout=30)
        stack.start_node(1)
        return killed_after

    # A steady stream over `seconds`; node 1 is SIGKILLed once a third is answered.
    load = PacedLoad(stack.post, bodies, threads=threads, interval=seconds * threads / count)
    killed_after = load.run(kill_and_restart_node_1, fault_after=count // 3, fault_wait=30, join_timeout=60)
    assert load.errors == []
    answers = load.answers
    # Apple retries any non-200; three more tries here, each after the previous answer.
    first_non_200 = load.retry_non_200(rounds=3)

    print(f"several nodes: {count} notifications, node 1 SIGKILLed after {killed_after} answers and restarted; "
          f"non-200 at first: {len(first_non_200)} "
          f"({sorted({str(answers_status) for answers_status in (answers[i][0] for i in first_non_200)})}), "
          f"after retries: {len(load.not_200())}")
    assert load.not_200() == []
    assert {answer[1]["status"] for answer in answers} <= {"applied", "duplicate"}

    # Each notification applied exactly once: its user hash, and its jti once in the stream.
    entries = stack.redis.cli("XRANGE", "siwa:events", "-", "+").split("\n")
    jtis = [entries[i + 1] for i, line in enumerate(entries[:-1]) if line == "jti"]
    subs_in_stream = [entries[i + 1] for i, line in enumerate(entries[:-1]) if line == "sub"]
    assert sorted(subs_in_stream) == sorted(subs)
    assert len(set(jtis)) == len(jtis) == count
    for sub in subs:
        stored = stack.redis.cli("HGET", f"siwa:user:{{{CLIENT_ID}:{sub}}}", "last_event_type")
        assert stored.strip() == "consent-revoked"
    # Both nodes served, and the restarted one is serving again.
    assert wait_until(lambda: stack.post(stack.sign(f"000999.nodes{run_id}.after"))[0] == 200, timeout=10)
    served = [sum(1 for line in node.log_events("request")) for node in stack.nodes.values()]
    assert all(number > 0 for number in served), served
