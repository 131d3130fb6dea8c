"""Test harness: a test PKI made with the openssl CLI, a real redis-server (with or
without AOF), and a real nginx running the shipped site files, rendered into a temp
prefix on free loopback ports by scripts/lib/local-stack.sh, the same renderer
scripts/run-local uses."""

import os
import pathlib
import re
import shutil
import socket
import subprocess
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
NGINX_DIR = REPO / "nginx"
CHECK_ENDPOINT = REPO / "scripts" / "check-endpoint"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

# The shell harness the scripts share: the site is rendered by its functions only.
LOCAL_STACK = REPO / "scripts" / "lib" / "local-stack.sh"


def run(args, **kwargs):
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=60, **kwargs)


# A Redis cluster node listens on its port + 10000 for its cluster bus: no port handed out
# goes above this, as in scripts/lib/local-stack.sh and the Swift tests.
HIGHEST_FREE_PORT = 55535


# Every port free_port handed out in this process: the kernel may offer a port again
# once its probe is closed, before the first user has bound it.
_PORTS_HANDED_OUT = set()


def unit_service_lines(path):
    """The [Service] section's setting lines of a systemd unit file, stripped, comments
    and blank lines left out."""
    lines, inside = [], False
    for raw in pathlib.Path(path).read_text().splitlines():
        line = raw.strip()
        if line.startswith("["):
            inside = line == "[Service]"
        elif inside and line and not line.startswith("#"):
            lines.append(line)
    return lines


def free_port():
    """A loopback port nobody is bound to right now, at most HIGHEST_FREE_PORT, never one
    handed out before in this process."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port <= HIGHEST_FREE_PORT and port not in _PORTS_HANDED_OUT:
            _PORTS_HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free loopback port at or below {HIGHEST_FREE_PORT} not handed out before")


def wait_until(condition, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def stop_process(process, timeout=15):
    """SIGTERM, bounded wait, SIGKILL; returns the exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    return process.returncode


class RedisServer:
    """redis-server on a free loopback port with its own --dir and log file: the one way
    the deployment tests and the soak start it (data nodes, cluster nodes, sentinels, the
    shipped configuration files). aof=True (appendonly yes) is how run-local runs it;
    aof=False (no persistence at all) where a test needs only a store; aof=None leaves it
    to the configuration file. Checked at start: the server answers PING (NOAUTH counts:
    it is up) and runs with the asked-for AOF."""

    def __init__(self, directory, aof=True, port=None, extra_args=(), network_namespace=None, config=None,
                 sentinel=False):
        """port: a given one (a node restarted where it was), else a free one; extra_args
        go to redis-server after the usual ones (for example --replicaof);
        network_namespace: the path of a network namespace (/proc/PID/ns/net) the server
        and redis-cli run in, whose loopback is then the server's; config: a file
        redis-server reads first (the usual options and extra_args win over it);
        sentinel: run as a sentinel (config is then its own file, which it rewrites)."""
        self.dir = pathlib.Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.log = self.dir / ("sentinel.log" if sentinel else "redis.log")
        self.prefix = ["nsenter", f"--net={network_namespace}"] if network_namespace else []
        persistence = [] if aof is None or sentinel else ["--appendonly", "yes" if aof else "no", "--save", ""]
        self.process = subprocess.Popen(
            [*self.prefix, "redis-server", *([str(config)] if config else []), "--bind", "127.0.0.1", "--port",
             str(self.port), "--dir", str(self.dir), *persistence, "--daemonize", "no", "--logfile", str(self.log),
             *(["--sentinel"] if sentinel else []), *map(str, extra_args)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_until(self._answers, timeout=10):
            self.stop()
            raise RuntimeError(f"redis-server did not answer within 10 s: {self._log_text()}")
        if aof is None or sentinel:
            return
        appendonly = self.cli("CONFIG", "GET", "appendonly").split()
        if appendonly != ["appendonly", "yes" if aof else "no"]:
            self.stop()
            raise RuntimeError(f"redis-server runs with {appendonly}, asked for aof={aof}")

    def _answers(self):
        if self.process.poll() is not None:
            raise RuntimeError(f"redis-server exited: {self._log_text()}")
        answer = subprocess.run([*self.prefix, "redis-cli", "-p", str(self.port), "PING"], capture_output=True, text=True,
                                timeout=5)
        if answer.stdout.startswith("NOAUTH"):
            return True
        # Another server may hold the port (ours then exits): a PONG counts from ours only.
        return answer.stdout.strip() == "PONG" and f"process_id:{self.process.pid}" in self.cli("INFO", "server").split()

    def _log_text(self):
        return self.log.read_text() if self.log.exists() else ""

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def cli(self, *args):
        """redis-cli's raw output (not a terminal: one value per line)."""
        return run([*self.prefix, "redis-cli", "-h", "127.0.0.1", "-p", str(self.port), *args]).stdout

    def hgetall(self, key):
        lines = self.cli("HGETALL", key).splitlines()
        assert len(lines) % 2 == 0, f"HGETALL {key}: odd number of lines: {lines!r}"
        return dict(zip(lines[0::2], lines[1::2]))

    def stop(self):
        stop_process(self.process)


def shipped_rate_limit():
    """(rate per second, burst) as shipped, so tests follow tuning of the files."""
    http_conf = (NGINX_DIR / "siwa-endpoint-http.conf").read_text()
    site = (NGINX_DIR / "siwa-endpoint.conf").read_text()
    rate = int(re.search(r"zone=siwa_notifications:\S+ rate=(\d+)r/s;", http_conf).group(1))
    burst = int(re.search(r"limit_req zone=siwa_notifications burst=(\d+) nodelay;", site).group(1))
    return rate, burst


class Pki:
    """A test CA and leaf certificates for localhost / 127.0.0.1, made by the shared
    certificate functions of scripts/lib/local-stack.sh (as run-local's and the Swift
    tests' are)."""

    def __init__(self, directory):
        self.dir = pathlib.Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_key = self.dir / "ca.key"
        self.ca_cert = self.dir / "ca.pem"
        local_stack("stack_make_ca", self.dir, 365, "siwa-endpoint test CA")

    def leaf(self, name, key="rsa", digest="sha256", days=90):
        """A valid leaf certificate; key is "rsa" (2048), "rsa1024" (too weak for ATS) or "ec" (P-256);
        digest is the CA's signature hash ("sha1" is too weak for ATS); days its validity from now."""
        local_stack("stack_make_leaf", self.dir, name, key, digest, days)
        return self.dir / f"{name}.pem", self.dir / f"{name}.key"

    def expired_leaf(self, name):
        """A leaf whose validity ended in the past (January 2020)."""
        local_stack("stack_make_expired_leaf", self.dir, name)
        return self.dir / f"{name}.pem", self.dir / f"{name}.key"


def local_stack(function, *args):
    """Runs one function of scripts/lib/local-stack.sh; its error message on failure."""
    script = 'set -euo pipefail; source "$0"; "$@"'
    result = subprocess.run(["bash", "-c", script, str(LOCAL_STACK), function, *map(str, args)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{function} failed: {result.stderr.strip()}"
    return result.stdout


class NginxStack:
    """The shipped nginx files running in a temp prefix, plus (optionally) the
    FastCGI stand-in on the upstream socket. `site_edit` lets a test derive a
    deliberately broken variant from the shipped site file."""

    def __init__(self, prefix, cert, key, site_edit=None, with_backend=True, backend_options=None, ec_pair=None):
        from fcgi_stub import FastCGIStub

        self.prefix = pathlib.Path(prefix)
        self.conf_dir = self.prefix / "conf"
        self.log_dir = self.prefix / "logs"
        self.temp_dir = self.prefix / "temp"
        for folder in (self.conf_dir, self.log_dir, self.temp_dir):
            folder.mkdir(parents=True, exist_ok=True)
        # nginx's workers must reach the socket and logs inside this prefix.
        os.chmod(self.prefix, 0o755)
        self.https_port = free_port()
        self.http_port = free_port()
        self.socket_path = self.prefix / "fcgi.sock"
        self.backend = FastCGIStub(str(self.socket_path), **(backend_options or {})) if with_backend else None

        # The shipped server name stays (its redirect is tested); IPv6 loopback too.
        # ec_pair: (certificate, key) served beside `cert`, as the shipped site serves an ECDSA
        # pair beside the RSA one; without it `cert` alone is served.
        local_stack("stack_render_site", REPO, self.conf_dir, self.log_dir, cert, key, self.https_port,
                    self.http_port, self.socket_path, "yes", "siwa.example.com", *(ec_pair or ("", "")))
        self.access_log_path = self.log_dir / "siwa-endpoint.access.log"
        site_file = self.conf_dir / "siwa-endpoint.conf"
        if site_edit is not None:
            site = site_file.read_text()
            edited = site_edit(site)
            assert edited != site, "site_edit changed nothing"
            site_file.write_text(edited)
        self.main_conf = self.conf_dir / "nginx.conf"
        self.pid_file = self.temp_dir / "nginx.pid"
        local_stack("stack_render_nginx_conf", self.conf_dir, self.log_dir, self.temp_dir, *self._jwks_server())
        self.process = None

    def _jwks_server(self):
        """(port, JWKS file, certificate, key) of an extra JWKS server in nginx.conf; none here."""
        return ()

    def nginx_args(self, *extra):
        return [NGINX, "-p", str(self.prefix), "-c", str(self.main_conf), *extra]

    def test_config(self):
        return subprocess.run(self.nginx_args("-t"), capture_output=True, text=True, timeout=30)

    def start(self):
        checked = self.test_config()
        assert checked.returncode == 0, f"nginx -t failed:\n{checked.stderr}"
        self.process = subprocess.Popen(self.nginx_args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.process.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", self.https_port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nginx did not start listening within 10 s")

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.process is not None and self.process.stderr:
            self.process.stderr.close()
        if self.backend is not None:
            self.backend.stop()

    def access_log(self):
        import json

        path = self.access_log_path
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    @property
    def url(self):
        return f"https://localhost:{self.https_port}/apple/notifications"
