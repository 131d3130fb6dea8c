"""Fixture parts for the rollout tests: the real siwa-endpoint binary, a real
redis-server, a real nginx rendered from the shipped files (serving the test JWKS over
HTTPS too, as for run-local), and scripts/rollout driving plain processes (--manager direct)."""

import contextlib
import http.client
import json
import os
import pathlib
import queue
import signal
import socket
import ssl
import subprocess
import threading
import time

from deploy_harness import REPO, RedisServer, wait_until as wait_for
from stack import JWKSNginxStack

ROLLOUT = REPO / "scripts" / "rollout"
INSTALL = REPO / "scripts" / "install"
CLIENT_ID = "com.example.app"
KEY_ID = "rollout-test-key"


class RedisGate:
    """A TCP relay to Redis on its own loopback port that the test opens and shuts: shut,
    it closes every relayed connection and every new one at once (the responder sees a
    connection that broke, the outage a dead Redis gives), while Redis itself keeps
    answering everyone else. Open, it relays bytes both ways untouched."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.is_open = True
        self.connections = set()
        self.relayed = 0
        self.running = True
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def wrap(self, path, binary, only_socket=None):
        """A release at `path` that runs `binary` with its Redis through this gate (the
        environment wins over the env file): every instance, or only the one whose
        socket's name ends in `only_socket`."""
        if only_socket is None:
            path.write_text(f"#!/bin/sh\nSIWA_REDIS_URL={self.url} exec {binary} \"$@\"\n")
        else:
            path.write_text("#!/bin/sh\n"
                            f"case \"$SIWA_FCGI_SOCKET\" in *{only_socket}) export SIWA_REDIS_URL={self.url} ;; esac\n"
                            f"exec {binary} \"$@\"\n")
        path.chmod(0o755)
        return path

    def _accept_loop(self):
        while self.running:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                admitted = self.is_open and self.running
            if not admitted:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.connections.update((client, upstream))
                self.relayed += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
            with self.lock:
                self.connections.discard(source)
                self.connections.discard(sink)
            source.close()  # each socket is the source of exactly one pump

    def shut(self):
        """From now on no byte reaches Redis through the gate; live connections are cut."""
        with self.lock:
            self.is_open = False
            live = list(self.connections)
        for end in live:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def open(self):
        with self.lock:
            self.is_open = True

    def stop(self):
        self.running = False
        self.shut()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.listener.close()
        self.thread.join(timeout=5)


class RolloutStack:
    """Everything a rollout acts on, in one temp directory. nginx starts with the
    shipped upstream file naming neither slot; `deploy()` runs the first rollout."""

    def __init__(self, directory, binary, cert, key):
        self.dir = pathlib.Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.binary = pathlib.Path(binary)
        self.lib_dir = self.dir / "lib"
        self.state_dir = self.dir / "state"
        self.socket_dir = self.dir / "run"
        self.spool_root = self.dir / "var"
        self.keys_dir = self.dir / "keys"
        self.redis = None
        self.nginx = None
        try:
            self.redis = RedisServer(self.dir / "redis", aof=False)
            subprocess.run([str(self.binary), "keygen", "--out", str(self.keys_dir), "--kid", KEY_ID], check=True,
                           capture_output=True, timeout=60)
            self.signing_key = self.keys_dir / "test-signing-key.pem"
            # The test JWKS from the same nginx, as the scripts and the other deployment tests serve it.
            self.nginx = JWKSNginxStack(self.dir / "nginx", cert, key, self.keys_dir / "test-jwks.json").start()
            self.ca_cert = pathlib.Path(cert).parent / "ca.pem"
            self.env_file = self.dir / "env"
            self.env_file.write_text(
                f"SIWA_CLIENT_IDS={CLIENT_ID}\n"
                f"SIWA_JWKS_URL={self.nginx.jwks_url}\n"
                f"SIWA_JWKS_CA_FILE={self.ca_cert}\n"
                f"SIWA_JWKS_CACHE={self.dir / 'jwks-cache.json'}\n"
                f"SIWA_REDIS_URL={self.redis.url}\n"
                "SIWA_REDIS_TIMEOUT_MS=500\n"
                "SIWA_WORKERS=4\n"
                "SIWA_SHUTDOWN_TIMEOUT_SECONDS=5\n"
            )
            self.upstream_file = self.nginx.conf_dir / "siwa-endpoint-upstream.conf"
        except BaseException:
            self.stop()
            raise

    # ---- scripts/rollout ----------------------------------------------------------
    def rollout_args(self, binary=None, *extra):
        nginx = " ".join(self.nginx.nginx_args())
        return [
            str(ROLLOUT), "--manager", "direct", "--binary", str(binary or self.binary),
            "--lib-dir", str(self.lib_dir), "--state-dir", str(self.state_dir),
            "--socket-dir", str(self.socket_dir), "--spool-root", str(self.spool_root),
            "--env-file", str(self.env_file), "--upstream", str(self.upstream_file),
            "--nginx", nginx, "--nginx-pid-file", str(self.nginx.pid_file),
            "--stop-timeout", "15", *extra,
        ]

    def rollout(self, binary=None, *extra, timeout=120):
        return subprocess.run(self.rollout_args(binary, *extra), capture_output=True, text=True, timeout=timeout)

    def rollout_held(self, waiting, while_held, timeout=120):
        """Runs scripts/rollout; once it says `waiting` (within 90 s: the health check and
        the old workers' exit come first), calls `while_held()` while it waits there, then
        waits up to `timeout` seconds for it to end. Returns (exit status, its output)."""
        rollout = subprocess.Popen(self.rollout_args(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in rollout.stdout] + [lines.put(None)],
                         daemon=True).start()
        seen = []
        try:
            deadline = time.monotonic() + 90
            while not any(waiting in line for line in seen):
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                assert line is not None, f"the rollout ended without saying {waiting!r}:\n" + "".join(seen)
                seen.append(line)
            while_held()
            rollout.wait(timeout=timeout)
            while (line := lines.get(timeout=10)) is not None:
                seen.append(line)
        finally:
            if rollout.poll() is None:
                rollout.kill()
                rollout.wait(timeout=10)
        return rollout.returncode, "".join(seen)

    def socket(self, slot):
        return self.socket_dir / f"{slot}.sock"

    def upstream_slot(self):
        text = self.upstream_file.read_text()
        names = [slot for slot in ("blue", "green") if f"unix:{self.socket(slot)};" in text]
        assert len(names) == 1, f"upstream names {names}:\n{text}"
        return names[0]

    def pid(self, slot):
        path = self.state_dir / f"{slot}.pid"
        return int(path.read_text()) if path.exists() else None

    def log_lines(self, slot):
        path = self.state_dir / f"{slot}.log"
        if not path.exists():
            return []
        lines = []
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
        return lines

    # ---- Notifications through nginx ------------------------------------------------
    def sign(self, sub, type_="consent-revoked"):
        result = subprocess.run(
            [str(self.binary), "sign", "--key", str(self.signing_key), "--kid", KEY_ID, "--type", type_,
             "--sub", sub, "--client-id", CLIENT_ID], check=True, capture_output=True, text=True, timeout=30)
        return result.stdout.strip().encode()

    def sign_count(self, sub, count, type_="consent-revoked"):
        """`count` distinct bodies from one `sign --count`: the Nth has sub `sub.N`."""
        result = subprocess.run(
            [str(self.binary), "sign", "--key", str(self.signing_key), "--kid", KEY_ID, "--type", type_,
             "--sub", sub, "--client-id", CLIENT_ID, "--count", str(count)], check=True, capture_output=True,
            text=True, timeout=60)
        bodies = [line.encode() for line in result.stdout.splitlines() if line]
        assert len(bodies) == count
        return [f"{sub}.{index}" for index in range(1, count + 1)], bodies

    def post(self, body):
        """POSTs one body through nginx over TLS on a fresh connection: (status, JSON body)."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        connection = http.client.HTTPSConnection("localhost", self.nginx.https_port, context=context, timeout=15)
        try:
            connection.request("POST", "/apple/notifications", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            payload = response.read()
            return response.status, json.loads(payload) if payload else None
        finally:
            connection.close()

    def user_exists(self, sub):
        return self.redis.cli("EXISTS", f"siwa:user:{{{CLIENT_ID}:{sub}}}").strip() == "1"

    def stream_length(self):
        return int(self.redis.cli("XLEN", "siwa:events"))

    def stream_subs(self):
        """The `sub` of every entry of the siwa:events stream, in order."""
        text = subprocess.run(["redis-cli", "-p", str(self.redis.port), "--json", "XRANGE", "siwa:events", "-", "+"],
                              check=True, capture_output=True, text=True, timeout=30).stdout
        entries = json.loads(text) if text.strip() else []
        subs = []
        for _, fields in entries:
            pairs = dict(zip(fields[0::2], fields[1::2]))
            subs.append(pairs.get("sub"))
        return subs

    def spool_status(self, slot):
        """`siwa-endpoint spool status` of a slot's spool directory (it reads, changes nothing)."""
        result = subprocess.run([str(self.binary), "spool", "status", "--spool-dir",
                                 str(self.spool_root / f"spool-{slot}")], check=True, capture_output=True, text=True,
                                timeout=30)
        return json.loads(result.stdout)

    # ---- Teardown ----------------------------------------------------------------------
    def stop_slots(self):
        slots = sorted(path.name[:-len(".pid")] for path in self.state_dir.glob("*.pid"))
        for slot in slots:
            pid = self.pid(slot)
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"serve" in cmdline:
                    os.kill(pid, signal.SIGTERM)
                    if not wait_for(lambda: not process_alive(pid), 15, 0.1):
                        os.kill(pid, signal.SIGKILL)

    def stop(self):
        with contextlib.suppress(Exception):
            self.stop_slots()
        for part in (self.nginx, self.redis):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.stop()


def process_alive(pid):
    """True while `pid` runs and is not a zombie (a zombie has exited)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"

