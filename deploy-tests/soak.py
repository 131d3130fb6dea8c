"""The contract under combined faults (scripts/soak). Real parts on loopback: three
redis-server data nodes (one primary, two replicas, AOF on) and three sentinels, or with
--cluster a Redis Cluster of six (three primaries, three replicas, AOF on); the real
`siwa-endpoint serve` with its spool, and nginx serving the test kit's JWKS over HTTPS
under a test CA (standing in for Apple's keys). Notifications signed by the test kit for
a few hundred users (every type, both spellings of account deletion, unknown types,
re-posts of a jti, event times out of order) are posted over FastCGI to serve's socket
by several threads, as nginx would pass them, while faults are injected in turn; every
non-200 is retried as Apple would (bounded in count and time). After the spool drains,
Redis is checked against the contract: every notification answered 200 is in the
stream exactly once, and every user's hash is what the rules give (soak_model.py).
Prints its figures; exits 1 on anything lost, doubled or wrong, 2 when it could not run."""

import argparse
import base64
import collections
import json
import os
import pathlib
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from deploy_harness import Pki, RedisServer, free_port, wait_until
from soak_model import Notification, user_problems
from stack import CLIENT_ID, KEY_ID, NOTIFICATION_PATH, JWKSNginxStack, ServeProcess, find_binary, run

MASTER = "siwa-soak"
DOWN_AFTER_MS = 2000
FAILOVER_TIMEOUT_MS = 10000

# Each group of users gets the same plan of events, posted in a shuffled order (so event
# times arrive out of order): (type as Apple sends it, event time offset in s, email
# label, is_private_email). Event times within a plan are distinct.
PLANS = {
    "email": [("email-enabled", 1, "a", True), ("email-disabled", 3, "b", False), ("email-enabled", 2, "c", True),
              ("apple-future-type", 4, None, None)],
    "revoked": [("consent-revoked", 5, None, None), ("consent-revoked", 2, None, None),
                ("email-enabled", 1, "a", False), ("unknown-soak-type", 6, None, None),
                ("email-disabled", 3, "b", True)],
    "deleted": [("email-enabled", 1, "a", True), ("account-deleted", 4, None, None), ("email-enabled", 6, "b", True),
                ("consent-revoked", 2, None, None), ("account-deleted", 3, None, None)],
    "old-spelling": [("account-delete", 2, None, None), ("email-disabled", 1, "a", False),
                     ("email-enabled", 5, "b", True), ("consent-revoked", 7, None, None)],
    "unknown-only": [("apple-future-type", 1, None, None), ("unknown-soak-type", 2, None, None)],
}
FAULTS = ["primary-killed", "primary-paused", "serve-killed", "replica-lost", "serve-sighup"]
# In a cluster "the primary" is the primary of the contract's one slot, and the slot is
# also migrated to another primary under load (ASK during the move, MOVED after).
CLUSTER_FAULTS = ["primary-killed", "primary-paused", "slot-migrated", "serve-killed", "replica-lost",
                  "serve-sighup"]
CLUSTER_NODE_TIMEOUT_MS = 2000
CLUSTER_KEY_PREFIX = "{siwa}"

# The fault timings, drawn from the seed (see FaultPlan). A pause of the primary lasts from
# under the time the sentinels (or the cluster's nodes) take to call it down to well past
# their failover: 1.5 s to 6 s with both at 2 s. Every signal is sent a drawn 0 to 25 ms
# after a post was sent, so kills land inside requests (verifying, in the script, in the
# WAIT, writing the spool) rather than between them.
PAUSE_SECONDS = (0.75 * DOWN_AFTER_MS / 1000, 3 * DOWN_AFTER_MS / 1000)
SIGNAL_AFTER_POST_MS = (0, 25)
# Rounds of seeds that once failed, replayed first by the suite's short soaks
# (test_soak.py); how to add one: docs/operations.md, "The soak".
RECORDED_ROUNDS = pathlib.Path(__file__).with_name("soak_seeds.txt")


def say(text):
    print(f"soak: {text}", flush=True)


# ---- FastCGI, as nginx speaks it to serve ---------------------------------------------

def _record(kind, content=b"", request_id=1):
    return struct.pack(">BBHHBB", 1, kind, request_id, len(content), 0, 0) + content


def _pair(name, value):
    def length(data):
        return struct.pack(">B", len(data)) if len(data) < 128 else struct.pack(">I", len(data) | 0x80000000)
    name, value = name.encode(), value.encode()
    return length(name) + length(value) + name + value


def fastcgi_request(socket_path, method, uri, body=b"", timeout=15):
    """(status, body bytes); (None, None) when the connection failed or dropped."""
    params = {"GATEWAY_INTERFACE": "CGI/1.1", "SERVER_PROTOCOL": "HTTP/1.1", "REQUEST_METHOD": method,
              "REQUEST_URI": uri, "DOCUMENT_URI": uri, "SCRIPT_NAME": uri, "QUERY_STRING": "",
              "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "40000", "SERVER_NAME": "localhost",
              "CONTENT_LENGTH": str(len(body)) if body else ""}
    if body:
        params["CONTENT_TYPE"] = "application/json"
    encoded = b"".join(_pair(name, value) for name, value in params.items())
    message = _record(1, struct.pack(">HB5x", 1, 0)) + _record(4, encoded) + _record(4)
    for start in range(0, len(body), 65535):
        message += _record(5, body[start:start + 65535])
    message += _record(5)
    try:
        with socket.socket(socket.AF_UNIX) as connection:
            connection.settimeout(timeout)
            connection.connect(str(socket_path))
            connection.sendall(message)
            received = b""
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
    except OSError:
        return None, None
    stdout, ended, offset = b"", False, 0
    while offset + 8 <= len(received):
        _, kind, _, length, padding, _ = struct.unpack(">BBHHBB", received[offset:offset + 8])
        content = received[offset + 8:offset + 8 + length]
        offset += 8 + length + padding
        if kind == 6:
            stdout += content
        elif kind == 3:
            ended = True
    if not ended:
        return None, None
    head, _, answer = stdout.partition(b"\r\n\r\n")
    status = 200
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"status:"):
            status = int(line.split()[1])
    return status, answer


# ---- Redis: data nodes and sentinels ---------------------------------------------------

def cli(port, *args, timeout=5):
    """redis-cli's raw output, or None when the server did not answer in time."""
    try:
        result = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *map(str, args)],
                                capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return result.stdout if result.returncode == 0 else None


class Sentinel:
    def __init__(self, directory, primary_port):
        self.dir = pathlib.Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = self.dir / "sentinel.conf"
        # A sentinel rewrites its file with what it learns: one writable file each.
        conf.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\nlogfile {self.dir / 'sentinel.log'}\n"
                        f"sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n"
                        f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                        f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n")
        # Started, and waited for until it answers, by the harness's one starter.
        self.server = RedisServer(self.dir, port=self.port, config=conf, sentinel=True)
        self.process = self.server.process

    def master(self):
        """(fields of SENTINEL master) or {}."""
        lines = (cli(self.port, "SENTINEL", "master", MASTER) or "").splitlines()
        return dict(zip(lines[0::2], lines[1::2]))

    def primary_port(self):
        lines = (cli(self.port, "SENTINEL", "get-master-addr-by-name", MASTER) or "").split()
        return int(lines[1]) if len(lines) == 2 else None

    def stop(self):
        self.server.stop()


class SentinelSet:
    """Three data nodes (AOF on) and three sentinels (quorum 2)."""

    def __init__(self, directory):
        self.dir = pathlib.Path(directory)
        self.nodes, self.sentinels = [], []
        self.paused = set()  # ports SIGSTOPped now (the sentinels are asked, not the nodes)
        try:
            self.nodes.append(RedisServer(self.dir / "node-0"))
            for index in (1, 2):
                self.nodes.append(RedisServer(self.dir / f"node-{index}",
                                              extra_args=["--replicaof", "127.0.0.1", self.nodes[0].port]))
            for index in range(3):
                self.sentinels.append(Sentinel(self.dir / f"sentinel-{index}", self.nodes[0].port))
            if not wait_until(self.formed, timeout=60, interval=0.2):
                raise RuntimeError("the sentinels did not see both replicas and each other within 60 s")
        except BaseException:
            self.stop()
            raise

    def formed(self):
        for sentinel in self.sentinels:
            fields = sentinel.master()
            if fields.get("num-slaves") != "2" or fields.get("num-other-sentinels") != "2":
                return False
        primary = self.node(self.primary_port())
        return primary is not None and (cli(primary.port, "INFO", "replication") or "").count("state=online") == 2

    @property
    def sentinel_list(self):
        return ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)

    def primary_port(self):
        """The port every answering sentinel names, if they agree and that node says it is a master."""
        named = {sentinel.primary_port() for sentinel in self.sentinels} - {None}
        if len(named) != 1:
            return None
        port = named.pop()
        role = cli(port, "ROLE", timeout=2)
        return port if role is not None and role.splitlines()[:1] == ["master"] else None

    def settled_port(self):
        """primary_port(), while no sentinel flags the primary down or in a failover."""
        if any(sentinel.master().get("flags") != "master" for sentinel in self.sentinels):
            return None
        return self.primary_port()

    def node(self, port):
        return next((node for node in self.nodes if node.port == port), None)

    def replica_of(self, primary_port):
        return next(node for node in self.nodes if node.port != primary_port)

    def is_replica(self, node):
        lines = (cli(node.port, "ROLE", timeout=2) or "").splitlines()
        return lines[:1] == ["slave"] and "connected" in lines

    def restart(self, node):
        """The node again on its port, directory and AOF; the sentinels make it a replica."""
        replacement = RedisServer(node.dir, port=node.port)
        self.nodes[self.nodes.index(node)] = replacement
        return replacement

    def stop(self):
        for process in self.sentinels + self.nodes:
            try:
                os.kill(process.process.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            process.stop()


class ClusterSet:
    """A Redis Cluster: six redis-server --cluster-enabled yes (AOF on, each with its own
    nodes.conf), joined by redis-cli --cluster create with one replica per primary. A
    replica takes over after CLUSTER_NODE_TIMEOUT_MS without its primary, whatever the age
    of its data (cluster-replica-validity-factor 0: a soak pauses primaries on purpose)."""

    def __init__(self, directory):
        self.dir = pathlib.Path(directory)
        self.nodes = []
        self.paused = set()
        try:
            for index in range(6):
                self.nodes.append(self.start_node(self.dir / f"node-{index}", free_port_with_bus_port()))
            create = subprocess.run(["redis-cli", "--cluster", "create",
                                     *[f"127.0.0.1:{node.port}" for node in self.nodes],
                                     "--cluster-replicas", "1", "--cluster-yes"],
                                    capture_output=True, text=True, timeout=120)
            if create.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {create.stdout[-800:]}{create.stderr}")
            if not wait_until(self.formed, timeout=60, interval=0.2):
                raise RuntimeError("the cluster did not form (state ok, three replicas in sync) within 60 s")
            self.slot = int(cli(self.nodes[0].port, "CLUSTER", "KEYSLOT", f"{CLUSTER_KEY_PREFIX}:events").strip())
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def start_node(directory, port):
        return RedisServer(directory, port=port, extra_args=[
            "--cluster-enabled", "yes", "--cluster-config-file", pathlib.Path(directory) / "nodes.conf",
            "--cluster-node-timeout", CLUSTER_NODE_TIMEOUT_MS, "--cluster-replica-validity-factor", "0"])

    def formed(self):
        for node in self.nodes:
            if "cluster_state:ok" not in (cli(node.port, "CLUSTER", "INFO", timeout=2) or ""):
                return False
        return sum(self.is_replica(node) for node in self.nodes) == 3

    @property
    def node_list(self):
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def answering(self):
        return [node for node in self.nodes if node.process.poll() is None and node.port not in self.paused]

    def slot_owner_seen_by(self, node):
        answer = cli_json(node.port, "CLUSTER", "SLOTS")
        for start, end, owner, *_ in answer or []:
            if start <= self.slot <= end:
                return int(owner[1])
        return None

    def primary_port(self):
        """The port every answering node names as the slot's owner, if they agree and that node says it is a master."""
        named = {self.slot_owner_seen_by(node) for node in self.answering()}
        if len(named) != 1 or None in named:
            return None
        port = named.pop()
        role = cli(port, "ROLE", timeout=2)
        return port if role is not None and role.splitlines()[:1] == ["master"] else None

    def settled_port(self):
        """primary_port(), while no answering node flags any node as failing (`fail?`) or failed."""
        for node in self.answering():
            for line in (cli(node.port, "CLUSTER", "NODES", timeout=2) or "").splitlines():
                fields = line.split()
                if len(fields) > 2 and {"fail", "fail?"} & set(fields[2].split(",")):
                    return None
        return self.primary_port()

    def masters(self):
        return [node for node in self.answering() if (cli(node.port, "ROLE", timeout=2) or "").startswith("master")]

    def replica_of(self, primary_port):
        for node in self.answering():
            lines = (cli(node.port, "ROLE", timeout=2) or "").splitlines()
            if lines[:1] == ["slave"] and lines[2:3] == [str(primary_port)]:
                return node
        return None

    def node(self, port):
        return next((node for node in self.nodes if node.port == port), None)

    def is_replica(self, node):
        lines = (cli(node.port, "ROLE", timeout=2) or "").splitlines()
        return lines[:1] == ["slave"] and "connected" in lines

    def restart(self, node):
        """The node again on its port, directory, nodes.conf and AOF: it rejoins as the new primary's replica."""
        replacement = self.start_node(node.dir, node.port)
        self.nodes[self.nodes.index(node)] = replacement
        return replacement

    def migrate_slot(self, source, target, pause=0.2):
        """The slot from `source` to `target` under load, as redis-cli --cluster reshard does it:
        IMPORTING, MIGRATING, the keys in batches (the stream first, so writes meet ASK
        while the rest moves; at least 20 keys a batch, about 40 batches), then the slot's
        new owner told to every primary. Returns the number of keys moved."""
        slot = str(self.slot)
        batch = max(20, int((cli(source, "CLUSTER", "COUNTKEYSINSLOT", slot) or "0").strip() or 0) // 40)
        source_id, target_id = cli(source, "CLUSTER", "MYID").strip(), cli(target, "CLUSTER", "MYID").strip()
        for port, args in ((target, ("IMPORTING", source_id)), (source, ("MIGRATING", target_id))):
            if (cli(port, "CLUSTER", "SETSLOT", slot, *args) or "").strip() != "OK":
                raise RuntimeError(f"CLUSTER SETSLOT {slot} {args[0]} refused on {port}")
        moved = 0
        first = [f"{CLUSTER_KEY_PREFIX}:events"]
        for _ in range(100_000):
            keys = first or (cli(source, "CLUSTER", "GETKEYSINSLOT", slot, batch) or "").split()
            first = []
            if not keys:
                break
            answer = cli(source, "MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys, timeout=10)
            if answer is None or answer.strip() not in ("OK", "NOKEY"):
                raise RuntimeError(f"MIGRATE from {source} to {target} failed: {answer!r}")
            moved += len(keys)
            time.sleep(pause)
        others = [node for node in self.masters() if node.port not in (source, target)]
        for node in [self.node(target), self.node(source)] + others:
            if (cli(node.port, "CLUSTER", "SETSLOT", slot, "NODE", target_id) or "").strip() != "OK":
                raise RuntimeError(f"CLUSTER SETSLOT {slot} NODE refused on {node.port}")
        return moved

    def stop(self):
        for node in self.nodes:
            try:
                os.kill(node.process.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            node.stop()


def free_port_with_bus_port():
    """A free loopback port whose cluster bus port (port + 10000) is free too."""
    for _ in range(2000):
        port = random.randint(20_000, 45_000)
        if all(_is_free(candidate) for candidate in (port, port + 10_000)):
            return port
    raise RuntimeError("no free loopback port with a free cluster bus port")


def _is_free(port):
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def cli_json(port, *args, timeout=5):
    """redis-cli's answer as JSON (RESP2), or None."""
    text = cli(port, "--json", *args, timeout=timeout)
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


# ---- The fault plan --------------------------------------------------------------------

class FaultPlan:
    """What faults come, in which order and with which timings: round after round, each
    round every fault once, in an order drawn with its timings from random.Random("S:R")
    for the run's seed S and the round's number R. A round depends on nothing but S and R
    (not on the machine's speed, not on how many posts went before), so `--seed S` replays
    a run's draws and `--replay S:R` runs round R of seed S first, in any run."""

    def __init__(self, seed, names, replays=()):
        self.seed, self.names, self.replays = seed, list(names), list(replays)

    def round(self, seed, number):
        draws = random.Random(f"{seed}:{number}")
        order = list(self.names)
        draws.shuffle(order)
        turns = []
        for fault in order:
            timing = {"signal after post ms": round(draws.uniform(*SIGNAL_AFTER_POST_MS), 1)}
            if fault == "primary-paused":
                timing["pause s"] = round(draws.uniform(*PAUSE_SECONDS), 2)
            turns.append((fault, f"{seed}:{number}", timing))
        return turns

    def turns(self):
        """The replayed rounds, then the run's own rounds 0, 1, 2... (bounded)."""
        for replay in self.replays:
            seed, number = replay
            yield from self.round(seed, number)
        for number in range(2000):
            yield from self.round(self.seed, number)

    @property
    def minimum_turns(self):
        """Every fault at least once, and every replayed round whole."""
        return len(self.names) * max(1, len(self.replays))


def parse_round(text):
    """`S:R` (seed and round number) as a pair of ints."""
    seed, _, number = text.partition(":")
    if not seed.isdigit() or not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not SEED:ROUND (two whole numbers)")
    return int(seed), int(number)


def recorded_rounds(mode, path=RECORDED_ROUNDS):
    """The rounds recorded for `mode` ("sentinel" or "cluster"): lines `MODE SEED:ROUND  # why`."""
    rounds = []
    for line in path.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields and fields[0] == mode:
            rounds.append(parse_round(fields[1]))
    return rounds


# ---- The notifications ----------------------------------------------------------------

def claims_of(body):
    payload = json.loads(body)["payload"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    events = claims["events"]
    return claims, (json.loads(events) if isinstance(events, str) else events)


def sign_pool(binary, signing_key, users, seed, passes):
    """[(Notification, body)] for `users` users spread over PLANS, one body per event of
    each plan, the plans `passes` times (each pass 10 s of event time after the last)."""
    per_group = max(1, users // len(PLANS))
    base_time = 1_700_000_000_000 + seed * 1000
    pool = []
    for group_number, (group, plan) in enumerate(PLANS.items()):
        base_sub = f"00{group_number + 1}000.50a{seed % 1000:03d}"
        for (raw_type, offset, label, private), number in [(row, n) for n in range(passes) for row in plan]:
            event_time = base_time + (number * 10 + offset) * 1000
            args = [str(binary), "sign", "--key", str(signing_key), "--kid", KEY_ID, "--type", raw_type, "--sub",
                    base_sub, "--client-id", CLIENT_ID, "--event-time", str(event_time), "--count", str(per_group)]
            email = None
            if label is not None:
                # The test kit's kind of address: a private relay name that reaches no one.
                email = f"soak-{group}-{label}@privaterelay.example.com"
                args += ["--email", email, "--private", "true" if private else "false"]
            for body in run(args).stdout.splitlines():
                claims, events = claims_of(body)
                assert events["type"] == raw_type and int(events["event_time"]) == event_time, events
                pool.append((Notification(events["sub"], raw_type, event_time, claims["jti"], email, private),
                             body.encode()))
    return pool


# ---- The soak -------------------------------------------------------------------------

class Soak:
    def __init__(self, arguments, directory, binary):
        self.args = arguments
        self.dir = directory
        self.binary = binary
        self.random = random.Random(arguments.seed)
        self.lock = threading.Lock()
        # Notified at every post sent: a signal's drawn moment counts from one.
        self.sent = threading.Condition(self.lock)
        self.sends = 0
        self.outcomes = collections.Counter()  # "200 applied", "503", "no answer"...
        self.faults = collections.Counter()
        self.answered = {}  # jti -> True once some post of it was answered 200
        self.unanswered = []
        self.posts = 0
        self.posters_left = arguments.threads
        self.redis = self.nginx = self.serve = None
        self.fault_names = CLUSTER_FAULTS if arguments.cluster else FAULTS
        self.plan = FaultPlan(arguments.seed, self.fault_names, arguments.replay)
        self.key_prefix = CLUSTER_KEY_PREFIX if arguments.cluster else "siwa"
        self.redirects = collections.Counter()  # in cluster mode: ASK and MOVED the migrations met

    # -- parts

    def start(self):
        pki = Pki(self.dir / "pki")
        cert, key = pki.leaf("localhost")
        kit = self.dir / "kit"
        run([str(self.binary), "keygen", "--out", str(kit), "--kid", KEY_ID])
        self.signing_key = kit / "test-signing-key.pem"
        if self.args.cluster:
            self.redis = ClusterSet(self.dir / "redis")
            masters = sorted(node.port for node in self.redis.masters())
            say(f"redis cluster primaries on {', '.join(map(str, masters))}, each with a replica; slot "
                f"{self.redis.slot} of {CLUSTER_KEY_PREFIX} on {self.redis.primary_port()}")
            redis_settings = {
                # In cluster mode the URL gives only the user, password and TLS; the nodes say where the slot is.
                "SIWA_REDIS_URL": "redis://127.0.0.1:6379/0",
                "SIWA_REDIS_CLUSTER_NODES": self.redis.node_list,
                "SIWA_KEY_PREFIX": CLUSTER_KEY_PREFIX,
            }
        else:
            self.redis = SentinelSet(self.dir / "redis")
            say(f"redis-server primary on {self.redis.nodes[0].port}, replicas on {self.redis.nodes[1].port} and "
                f"{self.redis.nodes[2].port}; sentinels on {self.redis.sentinel_list}")
            redis_settings = {
                # With sentinels the URL gives only the database; the primary comes from them.
                "SIWA_REDIS_URL": "redis://127.0.0.1:6379/0",
                "SIWA_REDIS_SENTINELS": self.redis.sentinel_list,
                "SIWA_REDIS_SENTINEL_MASTER": MASTER,
            }
        self.nginx = JWKSNginxStack(self.dir / "nginx", cert, key, kit / "test-jwks.json").start()
        serve_dir = self.dir / "serve"
        serve_dir.mkdir()
        self.socket_path = serve_dir / "fcgi.sock"
        settings = {
            "SIWA_CLIENT_IDS": CLIENT_ID,
            "SIWA_JWKS_URL": self.nginx.jwks_url,
            "SIWA_JWKS_CA_FILE": str(pki.ca_cert),
            "SIWA_JWKS_CACHE": str(serve_dir / "jwks-cache.json"),
            **redis_settings,
            "SIWA_REDIS_MIN_REPLICAS": str(self.args.min_replicas),
            "SIWA_REDIS_TIMEOUT_MS": "500",
            "SIWA_FCGI_SOCKET": str(self.socket_path),
            "SIWA_SPOOL_DIR": str(serve_dir / "spool"),
            "SIWA_NOTIFICATION_PATH": NOTIFICATION_PATH,
            "SIWA_WORKERS": str(self.args.workers),
        }
        self.env_file = serve_dir / "serve.env"
        self.env_file.write_text("".join(f"{name}={value}\n" for name, value in settings.items()))
        self.start_serve()
        if not wait_until(lambda: self.health()[0] == 200, timeout=30, interval=0.2):
            raise RuntimeError(f"serve is not healthy within 30 s: {self.health()}")

    def start_serve(self):
        self.serve = ServeProcess(self.binary, self.env_file, self.socket_path, self.dir / "serve" / "serve.log")

    def health(self):
        status, body = fastcgi_request(self.socket_path, "GET", "/healthz", timeout=10)
        try:
            return status, json.loads(body) if body else {}
        except ValueError:
            return status, {}

    def stop(self):
        for part in (self.serve, self.nginx, self.redis):
            if part is not None:
                try:
                    part.stop()
                except Exception as error:  # noqa: BLE001 - stopping the rest matters more
                    say(f"stopping {type(part).__name__}: {error}")

    # -- posting, as Apple does: every non-200 again, bounded

    def post_until_answered(self, notification, body):
        deadline = time.monotonic() + self.args.retry_seconds
        delay = 0.2
        for _ in range(self.args.retries):
            with self.sent:
                self.sends += 1
                self.sent.notify_all()
            status, answer = fastcgi_request(self.socket_path, "POST", NOTIFICATION_PATH, body)
            outcome = "no answer" if status is None else str(status)
            if status == 200:
                outcome += " " + json.loads(answer).get("status", "?")
            with self.lock:
                self.posts += 1
                self.outcomes[outcome] += 1
                if status == 200:
                    self.answered[notification.jti] = True
            if status == 200 or time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        if status != 200:
            with self.lock:
                self.unanswered.append(notification)

    def poster(self, schedule, next_index, started):
        while True:
            with self.lock:
                index = next_index[0]
                next_index[0] += 1
            if index >= len(schedule):
                with self.lock:
                    self.posters_left -= 1
                return
            due, (notification, body) = schedule[index]
            pause = started + due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            self.post_until_answered(notification, body)

    def answered_count(self):
        with self.lock:
            return sum(self.outcomes[o] for o in self.outcomes if o.startswith("200"))

    def wait_for_traffic(self, count, timeout):
        """Until `count` more posts were answered 200 (posting goes on meanwhile), or posting is over."""
        target = self.answered_count() + count
        return wait_until(lambda: self.answered_count() >= target or self.posters_left == 0, timeout=timeout,
                          interval=0.1)

    # -- faults

    def new_primary(self, old_port, timeout=60):
        found = {}

        def promoted():
            port = self.redis.primary_port()
            found["port"] = port
            return port is not None and port != old_port
        if not wait_until(promoted, timeout=timeout, interval=0.2):
            raise RuntimeError(f"no failover away from {old_port} within {timeout} s")
        return found["port"]

    def primary(self):
        if not wait_until(lambda: self.redis.primary_port() is not None, timeout=60, interval=0.2):
            raise RuntimeError("no primary named for the contract's keys within 60 s")
        return self.redis.node(self.redis.primary_port())

    def await_replica(self, node):
        if not wait_until(lambda: self.redis.is_replica(node), timeout=60, interval=0.2):
            raise RuntimeError(f"127.0.0.1:{node.port} did not become a connected replica within 60 s")

    def at_signal_point(self, timing):
        """Returns the drawn moment after the next post is sent (bounded: posting may be over)."""
        with self.sent:
            seen = self.sends
            self.sent.wait_for(lambda: self.sends > seen or self.posters_left == 0, timeout=10)
        time.sleep(timing["signal after post ms"] / 1000)

    def settled_primary(self, timeout=60):
        """The primary once the set agrees on one and has held that answer for a second
        (with sentinels: no sentinel flags it down or in a failover)."""
        held = {"port": None, "since": 0.0}

        def steady():
            port = self.redis.settled_port()
            if port is None or port != held["port"]:
                held.update(port=port, since=time.monotonic())
                return False
            return time.monotonic() - held["since"] >= 1.0
        if not wait_until(steady, timeout=timeout, interval=0.2):
            raise RuntimeError(f"the Redis set did not settle on one primary within {timeout} s")
        return held["port"]

    def inject(self, fault, timing):
        if fault == "primary-killed":
            node = self.primary()
            self.at_signal_point(timing)
            node.process.kill()
            node.process.wait(timeout=10)
            new_port = self.new_primary(node.port)
            self.wait_for_traffic(10, timeout=30)
            self.await_replica(self.redis.restart(node))
            return f"SIGKILL to the primary {node.port}; {new_port} promoted; {node.port} back as a replica"
        if fault == "primary-paused":
            # The drawn pause, posting going on meanwhile: shorter ones end before the set
            # calls the primary down, longer ones after a replica was promoted, and those
            # around the failover end while it is under way.
            node = self.primary()
            self.at_signal_point(timing)
            node.process.send_signal(signal.SIGSTOP)
            self.redis.paused.add(node.port)
            try:
                time.sleep(timing["pause s"])
            finally:
                node.process.send_signal(signal.SIGCONT)
                self.redis.paused.discard(node.port)
            settled = self.settled_primary()
            if settled == node.port:
                outcome = "no failover"
            else:
                self.await_replica(node)
                outcome = f"{settled} promoted, {node.port} back as a replica"
            self.wait_for_traffic(10, timeout=30)
            return f"SIGSTOP to the primary {node.port} for {timing['pause s']:.2f} s, SIGCONT; {outcome}"
        if fault == "slot-migrated":
            source = self.primary().port
            target = next(node.port for node in self.redis.masters() if node.port != source)
            before = self.cluster_redirects()
            keys = self.redis.migrate_slot(source, target)
            if not wait_until(lambda: self.redis.primary_port() == target, timeout=30, interval=0.2):
                raise RuntimeError(f"the nodes do not agree on {target} as the slot's owner within 30 s")
            self.wait_for_traffic(10, timeout=30)
            after = self.cluster_redirects()
            for name in after:
                self.redirects[name] += max(0, after[name] - before[name])
            return (f"slot {self.redis.slot} migrated from {source} to {target} under load ({keys} keys); serve "
                    f"followed ASK {max(0, after['ASK'] - before['ASK'])} times, "
                    f"MOVED {max(0, after['MOVED'] - before['MOVED'])}")
        if fault == "serve-killed":
            self.at_signal_point(timing)
            self.serve.process.kill()
            self.serve.process.wait(timeout=10)
            self.wait_for_traffic_failing(seconds=1.0)
            self.start_serve()
            return "SIGKILL to serve; restarted on its spool"
        if fault == "replica-lost":
            primary_port = self.primary().port
            node = self.redis.replica_of(primary_port)
            if node is None:
                raise RuntimeError(f"the primary {primary_port} has no replica to lose")
            self.at_signal_point(timing)
            node.process.kill()
            node.process.wait(timeout=10)
            self.wait_for_traffic(10, timeout=30)
            self.await_replica(self.redis.restart(node))
            return f"SIGKILL to the replica {node.port}; restarted"
        if fault == "serve-sighup":
            self.at_signal_point(timing)
            self.serve.process.send_signal(signal.SIGHUP)
            self.wait_for_traffic(10, timeout=30)
            return "SIGHUP to serve"
        raise ValueError(fault)

    def cluster_redirects(self):
        """serve's counts of ASK and MOVED followed (its /metrics)."""
        status, body = fastcgi_request(self.socket_path, "GET", "/metrics", timeout=10)
        counts = {"ASK": 0, "MOVED": 0}
        for line in (body or b"").decode(errors="replace").splitlines() if status == 200 else []:
            for name, metric in (("ASK", "siwa_redis_cluster_ask_total "),
                                 ("MOVED", "siwa_redis_cluster_moved_total ")):
                if line.startswith(metric):
                    counts[name] = int(float(line.split()[-1]))
        return counts

    def wait_for_traffic_failing(self, seconds):
        """Lets the posters meet the dead socket for a moment (bounded): their retries are the point."""
        before = self.posts
        wait_until(lambda: self.posts > before + 5, timeout=seconds, interval=0.05)

    def run(self):
        per_pass = sum(len(plan) for plan in PLANS.values()) * max(1, self.args.users // len(PLANS))
        wanted = self.args.rate * self.args.seconds * 100 // (100 + self.args.repost_percent)
        passes = min(100, max(1, -(-wanted // per_pass)))
        pool = sign_pool(self.binary, self.signing_key, self.args.users, self.args.seed, passes)
        reposts = self.random.sample(pool, len(pool) * self.args.repost_percent // 100)
        posts = pool + reposts
        self.random.shuffle(posts)
        spacing = self.args.seconds / len(posts)
        schedule = [(index * spacing, item) for index, item in enumerate(posts)]
        say(f"{len(pool)} notifications signed for {self.args.users // len(PLANS) * len(PLANS)} users, "
            f"{len(reposts)} re-posts of a jti; posting over {self.args.seconds} s from {self.args.threads} threads")

        started = time.monotonic()
        next_index = [0]
        threads = [threading.Thread(target=self.poster, args=(schedule, next_index, started), daemon=True)
                   for _ in range(self.args.threads)]
        for thread in threads:
            thread.start()
        turn = 0
        # The replayed rounds and every fault at least once, then on until the time is up.
        for fault, round_name, timing in self.plan.turns():
            if time.monotonic() - started >= self.args.seconds and turn >= self.plan.minimum_turns:
                break
            turn += 1
            if not self.wait_for_traffic(10, timeout=30):
                say("no traffic answered 200 for 30 s before the next fault")
            description = self.inject(fault, timing)
            self.faults[fault] += 1
            say(f"+{time.monotonic() - started:5.0f} s  round {round_name}, "
                f"{timing['signal after post ms']:.1f} ms after a post: {description}")
        posting_bound = self.args.seconds + self.args.retry_seconds + 120
        for thread in threads:
            thread.join(timeout=max(1, started + posting_bound - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            raise RuntimeError(f"posting did not finish within {posting_bound} s")

        def drained():
            status, document = self.health()
            return status == 200 and document.get("spool_depth") == 0
        if not wait_until(drained, timeout=180, interval=0.5):
            raise RuntimeError(f"the spool did not drain within 180 s: {self.health()}")
        return pool, posts

    # -- the check

    def check(self, pool):
        primary = self.primary()
        answer = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(primary.port), "-2", "--json", "XRANGE",
                                 f"{self.key_prefix}:events", "-", "+"],
                                capture_output=True, text=True, timeout=120, check=True)
        stream = [(entry_id, dict(zip(pairs[0::2], pairs[1::2]))) for entry_id, pairs in json.loads(answer.stdout)]
        by_jti = collections.Counter(fields.get("jti") for _, fields in stream)
        posted = {notification.jti: notification for notification, _ in pool}
        accepted = [posted[jti] for jti in self.answered]
        lost = [n for n in accepted if by_jti[n.jti] == 0]
        doubled = [n for n in accepted if by_jti[n.jti] > 1]
        unexpected = [jti for jti in by_jti if jti not in posted]
        wrong_entries = []
        for _, fields in stream:
            notification = posted.get(fields.get("jti"))
            if notification is None:
                continue
            wanted = {"client_id": CLIENT_ID, "sub": notification.sub, "type": notification.type,
                      "raw_type": notification.raw_type, "event_time": str(notification.event_time)}
            if any(fields.get(name) != value for name, value in wanted.items()) or (
                    notification.type == "unknown" and fields.get("applied") != "0"):
                wrong_entries.append(notification.jti)

        by_user = collections.defaultdict(list)
        for notification, _ in pool:
            by_user[notification.sub].append(notification)
        wrong_users = {}
        for sub, notifications in sorted(by_user.items()):
            accepted_here = [n for n in notifications if n.jti in self.answered]
            lines = (cli(primary.port, "HGETALL", f"{self.key_prefix}:user:{{{CLIENT_ID}:{sub}}}") or "").splitlines()
            problems = user_problems(accepted_here, dict(zip(lines[0::2], lines[1::2])))
            if problems:
                wrong_users[sub] = problems
        return {"stream entries": len(stream), "lost": lost, "doubled": doubled, "unexpected": unexpected,
                "wrong entries": wrong_entries, "wrong users": wrong_users, "users": len(by_user)}


def described(notification):
    """A notification in a report line: never its address."""
    return (f"{notification.raw_type} at {notification.event_time} for {notification.sub} "
            f"(jti {notification.jti})")


def report(soak, pool, posts, found, seconds):
    mode = "a Redis Cluster" if soak.args.cluster else "sentinels"
    say(f"ran {seconds:.0f} s against {mode}, seed {soak.args.seed}, "
        f"SIWA_REDIS_MIN_REPLICAS={soak.args.min_replicas}")
    say(f"posts: {soak.posts} ({len(pool)} notifications, {len(posts) - len(pool)} re-posts of a jti, "
        f"{soak.posts - len(posts)} retries)")
    say("outcomes: " + ", ".join(f"{outcome} {count}" for outcome, count in sorted(soak.outcomes.items())))
    say("faults: " + ", ".join(f"{fault} {soak.faults[fault]}" for fault in soak.fault_names))
    if soak.args.cluster:
        say(f"redirects during and after the migrations: ASK {soak.redirects['ASK']}, "
            f"MOVED {soak.redirects['MOVED']}")
    say(f"stream: {found['stream entries']} entries; users: {found['users']}")
    for name in ("lost", "doubled"):
        for notification in found[name][:5]:
            say(f"  {name}: {described(notification)}")
    for name in ("unexpected", "wrong entries"):
        for jti in found[name][:5]:
            say(f"  {name}: jti {jti}")
    for sub, problems in list(found["wrong users"].items())[:10]:
        say(f"  user {sub}: " + "; ".join(problems))
    for notification in soak.unanswered[:5]:
        say(f"  never answered 200: {described(notification)}")
    failures = {"lost": len(found["lost"]), "doubled": len(found["doubled"]),
                "unexpected": len(found["unexpected"]), "wrong entries": len(found["wrong entries"]),
                "users wrong": len(found["wrong users"]), "never answered 200": len(soak.unanswered)}
    say("result: " + ", ".join(f"{name} {count}" for name, count in failures.items()))
    return 1 if any(failures.values()) else 0


def parse(argv):
    parser = argparse.ArgumentParser(prog="scripts/soak", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sentinel", action="store_true", help="one primary, two replicas, three sentinels (default)")
    mode.add_argument("--cluster", action="store_true",
                      help="a Redis Cluster of three primaries and three replicas, keys under {siwa}")
    parser.add_argument("--seconds", type=int, default=600, help="how long faults are injected while posting")
    parser.add_argument("--seed", type=int, default=None,
                        help="the run's draws: posts and re-posts, the order of faults, pause lengths, the "
                             "moments of signals (default: random, printed)")
    parser.add_argument("--replay", type=parse_round, action="append", default=[], metavar="SEED:ROUND",
                        help="run round ROUND of seed SEED first (repeatable)")
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--rate", type=int, default=10, help="notifications per second wanted (the plans repeat)")
    parser.add_argument("--threads", type=int, default=4, help="concurrent posters")
    parser.add_argument("--workers", type=int, default=4, help="serve's SIWA_WORKERS")
    parser.add_argument("--min-replicas", type=int, choices=(0, 1, 2), default=1,
                        help="serve's SIWA_REDIS_MIN_REPLICAS")
    parser.add_argument("--repost-percent", type=int, default=15)
    parser.add_argument("--retries", type=int, default=60, help="posts of one notification at most")
    parser.add_argument("--retry-seconds", type=int, default=180, help="how long one notification is retried")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, AOF files)")
    arguments = parser.parse_args(argv)
    if arguments.seed is None:
        arguments.seed = random.SystemRandom().randrange(1, 1_000_000)
    # Bodies are signed at the start and expire a day later: runs stay well inside that.
    if not 10 <= arguments.seconds <= 43_200 or not 5 <= arguments.users <= 100_000:
        parser.error("--seconds must be 10..43200 and --users 5..100000")
    return arguments


def main(argv):
    arguments = parse(argv)
    say(f"seed {arguments.seed} (scripts/soak --seed {arguments.seed} draws the same posts, faults, pauses "
        f"and signal moments again)"
        + "".join(f"; replaying round {seed}:{number} first" for seed, number in arguments.replay))
    binary = find_binary()
    if binary is None:
        say("no siwa-endpoint binary: build it (swift build) or set SIWA_ENDPOINT_BINARY")
        return 2
    directory = pathlib.Path(tempfile.mkdtemp(prefix="siwa-soak-"))
    soak = Soak(arguments, directory, binary)
    started = time.monotonic()
    try:
        soak.start()
        pool, posts = soak.run()
        found = soak.check(pool)
        return report(soak, pool, posts, found, time.monotonic() - started)
    except RuntimeError as error:
        say(f"could not finish: {error} (logs under {directory})")
        arguments.keep = True
        return 2
    finally:
        soak.stop()
        if arguments.keep:
            say(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
