"""The REAL stack for end-to-end tests, all on loopback in one temp directory:
redis-server (its own port, AOF on), the real `siwa-endpoint serve` binary, and
nginx running the shipped site files (rendered by deploy_harness) with the FastCGI
upstream on serve's socket, plus one extra server in the same nginx that serves the
test kit's JWKS over HTTPS under the test CA, standing in for Apple's keys."""

import http.client
import json
import os
import pathlib
import socket
import ssl
import subprocess

from deploy_harness import (LOCAL_STACK, REPO, NginxStack, RedisServer, free_port, local_stack, run, stop_process,
                            wait_until)

CLIENT_ID = "com.example.app"
KEY_ID = "e2e-test-key"
NOTIFICATION_PATH = "/apple/notifications"


def find_binary():
    """SIWA_ENDPOINT_BINARY, else the release build, else the debug build; None if none."""
    override = os.environ.get("SIWA_ENDPOINT_BINARY")
    if override:
        path = pathlib.Path(override)
        if not os.access(path, os.X_OK):
            raise FileNotFoundError(f"SIWA_ENDPOINT_BINARY={override} is not an executable file")
        return path.resolve()
    for configuration in ("release", "debug"):
        path = REPO / ".build" / configuration / "siwa-endpoint"
        if os.access(path, os.X_OK):
            return path.resolve()
    return None


def build_binary():
    """A debug build of the product: minutes on a cold cache, hence only when none exists."""
    subprocess.run(["swift", "build", "--product", "siwa-endpoint"], cwd=REPO, check=True, timeout=3600)
    return (REPO / ".build" / "debug" / "siwa-endpoint").resolve()


class JWKSNginxStack(NginxStack):
    """The shipped site, exactly as deploy_harness renders it, and one more server in
    the same nginx (rendered by scripts/lib/local-stack.sh as for run-local): the test
    JWKS at https://127.0.0.1:<jwks_port>/auth/keys."""

    def __init__(self, prefix, cert, key, jwks_file):
        # Set before NginxStack.__init__, which renders nginx.conf with _jwks_server.
        self.jwks_port = free_port()
        self.jwks_file = pathlib.Path(jwks_file)
        self._jwks_cert, self._jwks_key = cert, key
        super().__init__(prefix, cert, key, with_backend=False)

    def _jwks_server(self):
        return (self.jwks_port, self.jwks_file, self._jwks_cert, self._jwks_key)

    @property
    def jwks_url(self):
        return f"https://127.0.0.1:{self.jwks_port}/auth/keys"


def write_endpoint_env(env_file, settings):
    """serve's settings file, written by scripts/lib/local-stack.sh as for run-local."""
    local_stack("stack_write_endpoint_env", env_file, *(f"{name}={value}" for name, value in settings.items()))


class ServeProcess:
    """The real `siwa-endpoint serve`, settings from an env file, stderr on a log file;
    started the way the scripts start it (stack_exec_endpoint of scripts/lib/local-stack.sh,
    which becomes serve in a clean environment), so the process held here is serve."""

    def __init__(self, binary, env_file, socket_path, log):
        self.socket_path = pathlib.Path(socket_path)
        self.log = pathlib.Path(log)
        with self.log.open("ab") as log_handle:
            # A clean environment: serve refuses unknown SIWA_* variables, and the
            # test runner's own (SIWA_ENDPOINT_BINARY) must not reach it.
            self.process = subprocess.Popen(
                ["bash", "-c", 'source "$0"; stack_exec_endpoint "$@"', str(LOCAL_STACK), str(binary), str(env_file)],
                env={"PATH": "/usr/bin:/bin"}, stdout=log_handle, stderr=log_handle)
        if not wait_until(self._listening, timeout=20):
            self.stop()
            raise RuntimeError(f"serve did not listen within 20 s: {self.log_text()}")

    def _listening(self):
        if self.process.poll() is not None:
            raise RuntimeError(f"serve exited at start: {self.log_text()}")
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(str(self.socket_path))
            return True
        except OSError:
            return False
        finally:
            probe.close()

    def log_text(self):
        return self.log.read_text() if self.log.exists() else ""

    def log_events(self, event):
        lines = [json.loads(line) for line in self.log_text().splitlines() if line.strip()]
        return [line for line in lines if line.get("event") == event]

    def stop(self):
        return stop_process(self.process)


class RealStack:
    """redis-server + serve + nginx (shipped site, TLS under the test CA), started
    in `directory`. Always call stop(), which stops what was started so far."""

    def __init__(self, directory, binary, ca_cert, cert, key, extra_settings=None):
        self.dir = pathlib.Path(directory)
        # More settings for serve (Google's, for example), given a callable of the stack's
        # signing-kit directory, since some depend on what it holds.
        self.extra_settings = extra_settings
        self.dir.mkdir(parents=True, exist_ok=True)
        self.binary = pathlib.Path(binary)
        self.ca_cert = pathlib.Path(ca_cert)
        self.redis = self.nginx = self.serve = None
        try:
            self._start(cert, key)
        except BaseException:
            self.stop()
            raise

    def _start(self, cert, key):
        kit = self.dir / "kit"
        run([str(self.binary), "keygen", "--out", str(kit), "--kid", KEY_ID])
        self.signing_key = kit / "test-signing-key.pem"

        self.redis = RedisServer(self.dir / "redis")
        self.nginx = JWKSNginxStack(self.dir / "nginx", cert, key, kit / "test-jwks.json").start()

        settings = {
            "SIWA_CLIENT_IDS": CLIENT_ID,
            "SIWA_JWKS_URL": self.nginx.jwks_url,
            "SIWA_JWKS_CA_FILE": str(self.ca_cert),
            "SIWA_JWKS_CACHE": str(self.dir / "serve" / "jwks-cache.json"),
            "SIWA_REDIS_URL": self.redis.url,
            "SIWA_REDIS_TIMEOUT_MS": "500",
            "SIWA_FCGI_SOCKET": str(self.nginx.socket_path),
            "SIWA_SPOOL_DIR": str(self.dir / "serve" / "spool"),
            "SIWA_NOTIFICATION_PATH": NOTIFICATION_PATH,
            "SIWA_WORKERS": "3",
        }
        if self.extra_settings is not None:
            settings.update(self.extra_settings(kit))
        (self.dir / "serve").mkdir(exist_ok=True)
        env_file = self.dir / "serve" / "serve.env"
        write_endpoint_env(env_file, settings)
        self.serve = ServeProcess(self.binary, env_file, self.nginx.socket_path, self.dir / "serve" / "serve.log")

        # Healthy through nginx: keys fetched over HTTPS, Redis reachable.
        if not wait_until(lambda: self.request("GET", "/healthz")[0] == 200, timeout=20, interval=0.1):
            raise RuntimeError(f"serve is not healthy through nginx: {self.serve.log_text()}")

    @property
    def url(self):
        return f"https://localhost:{self.nginx.https_port}{NOTIFICATION_PATH}"

    def sign(self, event_type, sub, email=None, private=None, event_time_ms=None, jti=None, client_id=CLIENT_ID):
        """A request body signed by the test kit, in the shape Apple sends."""
        args = [str(self.binary), "sign", "--key", str(self.signing_key), "--kid", KEY_ID, "--type", event_type,
                "--sub", sub, "--client-id", client_id]
        if email is not None:
            args += ["--email", email, "--private", "true" if private else "false"]
        if event_time_ms is not None:
            args += ["--event-time", str(event_time_ms)]
        if jti is not None:
            args += ["--jti", jti]
        return run(args).stdout.strip().encode()

    def request(self, method, path, body=None, headers=None):
        """One HTTPS request to https://localhost:<port> that verifies the chain and
        the name against the test CA; returns (status, headers dict, body bytes)."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        connection = http.client.HTTPSConnection("localhost", self.nginx.https_port, context=context, timeout=10)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def post(self, body):
        return self.request("POST", NOTIFICATION_PATH, body=body, headers={"Content-Type": "application/json"})

    def user(self, sub):
        return self.redis.hgetall(f"siwa:user:{{{CLIENT_ID}:{sub}}}")

    def stop(self):
        """nginx, then serve (SIGTERM: a clean stop), then Redis. Returns serve's exit status."""
        status = None
        if self.nginx is not None:
            self.nginx.stop()
        if self.serve is not None:
            status = self.serve.stop()
        if self.redis is not None:
            self.redis.stop()
        return status
